"""The `tuner` command line: `app` registers every command, `options` holds what commands share,
one module per command group. Imports any tuner package, db and api; nothing imports it."""

from tuner.cli.usage import plain_argument_usage

plain_argument_usage()  # before any --help is drawn: `tuner.cli.usage`
