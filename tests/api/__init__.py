"""Tests for api."""
