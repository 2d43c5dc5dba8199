"""``airlock conformance``: run the protocol conformance vectors in ``eval/``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

import airlock


def conformance_command(
    vectors: Annotated[
        Path | None,
        typer.Option(
            "--vectors",
            metavar="DIR",
            help="Vector directory (default: eval/vectors of this checkout).",
        ),
    ] = None,
) -> None:
    """Run the RFC 8785, Wycheproof Ed25519, DSSE and Airlock vectors; exit 1 on any miss."""
    if vectors is not None and not vectors.is_dir():
        typer.echo(f"error: --vectors {vectors}: not a directory of vectors", err=True)
        raise typer.Exit(2)
    try:
        from eval.conformance import run  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        # The installed `airlock` script does not have the checkout on its path, only the
        # packages: find eval/ next to the airlock package this runs from.
        checkout = Path(airlock.__file__).resolve().parents[1]
        if not (checkout / "eval" / "conformance.py").is_file():
            typer.echo("the conformance suite lives in eval/ of a source checkout", err=True)
            raise typer.Exit(2) from None
        sys.path.insert(0, str(checkout))
        from eval.conformance import run  # type: ignore[import-not-found,unused-ignore]
    raise typer.Exit(run(vectors))
