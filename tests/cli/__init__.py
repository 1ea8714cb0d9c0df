"""Tests for cli."""
