"""The `tuner` command line: `app` registers every command, `options` holds what commands share,
one module per command group. Imports any tuner package, db and api; nothing imports it."""
