"""``airlock conformance``: run the protocol conformance vectors in ``eval/``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def conformance_command(
    vectors: Annotated[
        Path | None,
        typer.Option(
            "--vectors", help="Vector directory (default: eval/vectors of this checkout)."
        ),
    ] = None,
) -> None:
    """Run the RFC 8785, Wycheproof Ed25519, DSSE and Airlock vectors; exit 1 on any miss."""
    try:
        from eval.conformance import run  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        typer.echo("the conformance suite lives in eval/ of a source checkout", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(run(vectors))
