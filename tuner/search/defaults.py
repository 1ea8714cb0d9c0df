"""The default search, kept apart from the strategies so that the CLI can name it without
importing optuna."""

# The default search of `tuner sweep`, `POST /sweeps` and `tuner verify --fix`: the strategy and
# budget that came closest to the exhaustive optimum in bench/search_quality.py (bench/README.md):
# at 128 trials, 10 seeds, 1.0000 (min 1.000) on real GPU timings of another GEMM
# kernel and 1.0000 (min 0.992) on the synthetic sm90 landscape; a recorded GPU landscape of
# our kernel should confirm it.
DEFAULT_STRATEGY = "guided"
DEFAULT_TRIALS = 128
