"""Tests of tuner.core, the facts every layer shares."""
