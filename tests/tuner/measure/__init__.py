"""Tests of tuner.measure."""
