"""Airlock test suite."""
