"""Benchmark script tests."""
