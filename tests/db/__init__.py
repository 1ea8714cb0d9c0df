"""Tests for db."""
