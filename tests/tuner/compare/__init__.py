"""Tests of tuner.compare."""
