"""The Airlock services, one package each, separated by import contracts.

Each service is a separate process holding only its own capability
(docs/architecture.md#components); the import boundaries between them are checked by import-linter
in ``make lint``.
"""
