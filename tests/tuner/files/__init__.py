"""Tests of tuner.files."""
