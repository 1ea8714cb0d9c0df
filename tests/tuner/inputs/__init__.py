"""Tests of tuner.inputs."""
