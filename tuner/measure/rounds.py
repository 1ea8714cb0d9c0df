"""Rounds of the interleaved re-timing (tuner.measure.noise), kept apart from it so that the CLI
names the default in `--help` without importing the kernel modules."""

# Samples per config in the re-timing. 12 rounds: every config starts a round equally often
# whether 2, 3 or 4 configs are re-timed (12 is a multiple of each), and p20/p80 of 12 samples
# rest on 2-3 samples beyond them on each side. At about 1 ms a sample on a GPU
# (tuner.measure.timing.SAMPLE_S) four configs cost some 50 ms, less than one trial's timing.
RETIME_ROUNDS = 12
