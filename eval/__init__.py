"""Conformance vectors and (later) the attack suite."""
