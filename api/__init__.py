"""The HTTP service: app factory (`app`), one router per resource (`routes/`), the HTML report
and Prometheus metrics. Imports db and tuner's pure packages (files, kernels, inputs, search's
names, run's planning); never torch or triton."""
