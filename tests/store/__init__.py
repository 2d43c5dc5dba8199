"""Tests for airlock.store: engines, migrations and the audit chain."""
