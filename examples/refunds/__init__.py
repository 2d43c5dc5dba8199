"""The refunds example: a support agent's ``refund`` behind an Airlock gate (README.md)."""
