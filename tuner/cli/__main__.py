"""`python -m tuner.cli`: the `tuner` command."""

from tuner.cli.app import main

main()
