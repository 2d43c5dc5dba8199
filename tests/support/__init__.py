"""Test support shared across test directories (devcloud launcher, builders)."""
