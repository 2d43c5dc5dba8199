"""Tests of examples/: each example run as its README says."""
