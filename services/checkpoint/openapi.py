"""Print the checkpoint's OpenAPI document (regenerate the committed file with
``python -m services.checkpoint.openapi > services/checkpoint/openapi.json``).

The committed ``openapi.json`` is the API contract the web app and the agent code
against; a test fails when it and the code drift apart.
"""

from __future__ import annotations

import json
import sys

from .app import bare_app, openapi_schema

__all__ = ["render"]


def render() -> str:
    return (
        json.dumps(openapi_schema(bare_app()), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )


if __name__ == "__main__":
    sys.stdout.write(render())
