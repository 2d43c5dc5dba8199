"""The web app: the human review surface. Talks only to the checkpoint API.

It holds nothing but each user's own session (the checkpoint session token, in that
person's HttpOnly cookie): no cloud credentials, keys or service tokens, and no server
side session store. It must never import a service, the cloud adapters or the store
(import-linter enforces it); every decision is the checkpoint's.

Public face: :func:`create_app`.
"""

from .app import create_app

__all__ = ["create_app"]
