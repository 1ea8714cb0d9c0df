"""Tests of the fused-MoE kernel family."""
