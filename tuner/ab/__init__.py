"""`tuner ab`'s core: two serving arms (`arms`), the workloads as arguments of vLLM's own load
client (`workloads`), the order of runs and the verdicts (`stats`), and the A/B's loop (`run`).
It writes nothing to the store: the command keeps each run (`tuner.core.AbRunRow`) as the loop
hands it over."""
