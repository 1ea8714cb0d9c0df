"""Tests for tuner."""
