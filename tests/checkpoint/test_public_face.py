"""services.checkpoint's ``__all__`` is a working face: every name resolves to the
object its module defines, and a name outside it is an AttributeError."""

from __future__ import annotations

import importlib

import pytest

from services import checkpoint


@pytest.mark.parametrize("name", checkpoint.__all__)
def test_every_public_name_resolves(name: str) -> None:
    home = importlib.import_module(checkpoint._HOME[name], "services.checkpoint")
    assert getattr(checkpoint, name) is getattr(home, name)


def test_the_table_and_all_agree() -> None:
    assert sorted(checkpoint._HOME) == sorted(checkpoint.__all__)


def test_a_private_name_is_not_on_the_face() -> None:
    with pytest.raises(AttributeError):
        _ = checkpoint.__getattr__("_tx")
