"""Tests, one package per layer of the library (see tests/test_layering.py)."""
