"""Tests of tuner.search."""
