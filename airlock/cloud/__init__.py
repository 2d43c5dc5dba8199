"""Cloud provider ports (CloudReader, CloudWriter) and the Alibaba Cloud adapter.

The adapter's writer is its own module (``airlock.cloud.alibaba.writer``) so the agent,
which gets a reader only, can be forbidden to import it (``pyproject.toml``).
"""
