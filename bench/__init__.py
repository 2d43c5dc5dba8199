"""Benchmarks: ratios against raw primitives measured in the same run. Not tests."""
