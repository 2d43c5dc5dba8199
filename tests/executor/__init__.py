"""Executor tests: ledger, execute path, recovery, receipts, races and crashes."""
