"""Tests of tuner.kernels."""
