"""Tests mirror the packages: tuner, db, api and the CLI."""
