"""Storage shared by every service: engines, migrations, and the hash-chained audit log."""
