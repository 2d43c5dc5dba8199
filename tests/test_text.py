"""airlock.text, the one definition of inert text: the forms every surface shows."""

from __future__ import annotations

import json

from airlock.text import inert, inert_json

#: A CSI, an OSC, CR/LF, a right-to-left override and a tag "A" above U+FFFF.
HOSTILE = "\x9b2J\x9d0;x\x07\r\n\u202e\U000e0041"


def test_every_surface_gets_one_escape_style() -> None:
    assert inert(HOSTILE) == "\\u009b2J\\u009d0;x\\u0007\\u000d\\u000a\\u202e\\U000e0041"
    assert inert("café 中文 😀") == "café 中文 😀"


def test_json_keeps_its_value_with_surrogate_pairs() -> None:
    shown = inert_json({"k": HOSTILE}, indent=None)
    assert shown.isprintable() and "\\udb40\\udc41" in shown
    assert json.loads(shown) == {"k": HOSTILE}


def test_a_clip_never_cuts_an_escape_in_half() -> None:
    assert inert("x" * 6 + "\u202e" * 4, limit=10) == "x" * 6 + "…"
    assert inert("x" * 3 + "\u202e", limit=9) == "xxx\\u202e"
    assert inert("y" * 12, limit=10) == "y" * 9 + "…"


def test_a_page_keeps_its_line_breaks_but_not_a_terminal() -> None:
    assert inert("a\nb\t\u202e", layout=True) == "a\nb\t\\u202e"
    assert inert("a\nb\t", layout=False) == "a\\u000ab\\u0009"
