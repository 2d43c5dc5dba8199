"""Examples a person can run against ``make up`` (each has its own README)."""
