"""The default search, kept apart from the strategies so that the CLI can name it without
importing optuna."""

# The default search of `tuner sweep`, `POST /sweeps` and `tuner verify --fix`: the strategy and
# budget that reached >= 0.99 (geomean) and >= 0.97 (min) of the exhaustive optimum on the
# synthetic sm90 landscape (bench/README.md, bench/results/search_quality_*.json); a recorded
# GPU landscape should confirm it.
DEFAULT_STRATEGY = "local"
DEFAULT_TRIALS = 128
