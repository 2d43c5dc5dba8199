"""Text from the agent or the cloud cannot reorder what an approver reads.

A right-to-left override (U+202E) in an instance name or a reason makes the browser
draw the following characters backwards — ``dorp-db`` reads ``prod-db``. Every string a
page prints shows control, format and separator characters as ``\\uXXXX`` instead, as
the CLI does; line breaks stay.
"""

from __future__ import annotations

from markupsafe import Markup

from webapp import present

from .conftest import make_site
from .fakes import action_value

_RLO = "\u202e"


def test_a_bidi_override_in_agent_text_is_shown_escaped_never_raw() -> None:
    site = make_site()
    with site.client:
        site.sign_in()
        site.fake.add(action_value(name=f"scratch-{_RLO}bd-dorp", reason=f"Idle {_RLO}evil"))
        html = site.client.get("/proposals/prop_fake000001").text
    assert _RLO not in html
    assert "scratch-\\u202ebd-dorp" in html
    assert "Idle \\u202eevil" in html


def test_inert_keeps_line_breaks_and_markup() -> None:
    assert present.inert("two\nlines\ttab") == "two\nlines\ttab"
    assert present.inert(f"a{_RLO}b\u200bc\x07") == "a\\u202eb\\u200bc\\u0007"
    shown = present.inert(Markup(f"<b>{_RLO}</b>"))
    assert isinstance(shown, Markup) and shown == Markup("<b>\\u202e</b>")
    assert present.inert(7) == 7
