"""Checkpoint tests: policy, keys, API rules, quorum races, the full loop."""
