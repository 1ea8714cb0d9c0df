"""Search: strategies behind one interface (`base.Strategy`, registered by name in `registry`)
and warm starts. A strategy sees a runner only as the `evaluate` callable it is given. Imports
tuner.kernels and tuner.measure.trial (the outcome `evaluate` returns); never the store or a GPU.
"""
