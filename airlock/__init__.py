"""Airlock: the approval gate between an AI agent and production.

This package is the kernel every service shares (protocol, storage, audit, cloud
adapters, settings) plus the CLI in :mod:`airlock.cli`, the only composition root.
The kernel must never import a service (``services.*``) or the web app; import-linter
enforces that in ``make lint``.
"""

#: The one place the version is set: setuptools reads it (pyproject, tool.setuptools.dynamic).
__version__ = "0.1.0"
