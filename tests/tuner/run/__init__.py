"""Tests of tuner.run."""
