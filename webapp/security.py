"""The page's own defences: response headers, cookies, and CSRF tokens without server state.

* Headers: a Content-Security-Policy with no inline script and no inline style
  (``default-src 'self'``), framing denied, no MIME sniffing, no referrer.
* The session cookie holds the person's checkpoint session token and nothing else;
  HttpOnly, SameSite=Strict, Secure over HTTPS (``__Host-`` prefixed when Secure).
* CSRF: a random per-browser cookie (HttpOnly, SameSite=Lax) and, in every form, the
  HMAC-SHA256 of the session token keyed by that cookie. A cross-site page can read
  neither cookie, so it cannot produce the token; binding it to the session means a
  token seen before sign-in is worthless after. A POST is also refused when the browser
  says it came from another origin (``Origin`` / ``Sec-Fetch-Site``).
* The "decision recorded" banner: a short-lived cookie (HttpOnly, SameSite=Strict) set
  by the POST that made the decision and cleared by the page that shows it, so a link
  cannot make the page claim a decision nobody made.
* Lax, not Strict, for the CSRF key: a link from another site is a top-level navigation
  that carries no Strict cookie, and the key would then be replaced by the answer's
  Set-Cookie, breaking every form the person has open. Lax costs nothing here: the key
  is never readable cross-site, and the token derived from it is still required and
  checked on every POST. The session cookie stays Strict, and it is only ever cleared
  when the request carried it, so such a link never signs anyone out.

This module must never log a cookie or a token, and never keep one server-side.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final, Literal

from starlette.requests import Request
from starlette.responses import Response

__all__ = [
    "CSRF_FIELD",
    "SECURITY_HEADERS",
    "Cookies",
    "csrf_problem",
    "csrf_token",
    "new_csrf_key",
    "same_origin",
]

CSRF_FIELD: Final = "csrf_token"
_CSRF_CONTEXT: Final = b"airlock-webapp/csrf/v1\x00"
_FLASH_SECONDS: Final = 60

SECURITY_HEADERS: Final = {
    # No 'unsafe-inline' anywhere: the pages carry no inline script, no style attribute,
    # and the SVG charts are styled through classes in the local stylesheet.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
    # Pages show live decisions and carry CSRF tokens: never cache them.
    "Cache-Control": "no-store",
}


class Cookies:
    """Names and flags of the two cookies, for one request's transport (HTTP or HTTPS)."""

    def __init__(self, request: Request, *, secure_setting: bool) -> None:
        self.secure = secure_setting or request.url.scheme == "https"
        # The __Host- prefix pins a cookie to this host and path "/", and browsers only
        # accept it with Secure: a sibling subdomain cannot plant one.
        prefix = "__Host-" if self.secure else ""
        self.session_name = f"{prefix}airlock_session"
        self.csrf_name = f"{prefix}airlock_csrf"
        self.flash_name = f"{prefix}airlock_done"

    def carries_session(self, request: Request) -> bool:
        """The request carried a session cookie, usable or not."""
        return self.session_name in request.cookies

    def session(self, request: Request) -> str | None:
        value = request.cookies.get(self.session_name)
        if not value or len(value) > 256 or not value.isascii() or not value.isprintable():
            return None
        return value

    def csrf_key(self, request: Request) -> str | None:
        value = request.cookies.get(self.csrf_name)
        if not value or len(value) > 128 or not value.isascii():
            return None
        return value

    def set_session(self, response: Response, token: str, max_age: int) -> None:
        self._set(response, self.session_name, token, max_age=max(0, max_age), samesite="strict")

    def clear_session(self, response: Response) -> None:
        self._set(response, self.session_name, "", max_age=0, samesite="strict")

    def set_csrf_key(self, response: Response, key: str) -> None:
        # A browser-lifetime cookie: it protects the sign-in form too, before any session.
        # Lax: see the module docstring.
        self._set(response, self.csrf_name, key, max_age=None, samesite="lax")

    def flash(self, request: Request) -> str | None:
        """The decision just recorded, as ``"<proposal id>:<verb>"``, if any."""
        value = request.cookies.get(self.flash_name)
        if not value or len(value) > 128 or not value.isascii():
            return None
        return value

    def set_flash(self, response: Response, value: str) -> None:
        # Long enough to follow the redirect that comes with it, and no longer.
        self._set(response, self.flash_name, value, max_age=_FLASH_SECONDS, samesite="strict")

    def clear_flash(self, response: Response) -> None:
        self._set(response, self.flash_name, "", max_age=0, samesite="strict")

    def _set(
        self,
        response: Response,
        name: str,
        value: str,
        *,
        max_age: int | None,
        samesite: Literal["strict", "lax"],
    ) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path="/",
            secure=self.secure,
            httponly=True,
            samesite=samesite,
        )


def new_csrf_key() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(key: str, session: str | None) -> str:
    """The form token: HMAC-SHA256 keyed by the browser's CSRF cookie over its session."""
    message = _CSRF_CONTEXT + (session or "").encode("ascii")
    return hmac.new(key.encode("ascii"), message, hashlib.sha256).hexdigest()


def same_origin(request: Request) -> bool:
    """False when the browser tells us the request came from another origin.

    ``Sec-Fetch-Site`` is set by the browser and cannot be forged by a page. ``Origin`` is
    checked too, except for ``null``: with ``Referrer-Policy: no-referrer`` Chromium
    sends ``Origin: null`` even on a same-origin form POST.

    The Origin's host must be the request's ``Host``; its scheme may be the request's own
    or https. Behind a TLS-terminating reverse proxy (the documented deployment) the app
    sees http while the browser, speaking https to the proxy, says ``https://host``.
    Accepting https for the same host admits no other site: only whoever serves this
    host over https can be that origin.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site != "same-origin":
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True  # the token still has to match
    host = request.headers.get("host", "").lower()
    if not host:
        return False
    return origin.lower() in {f"{request.url.scheme}://{host}", f"https://{host}"}


def csrf_problem(request: Request, cookies: Cookies, submitted: str | None) -> str | None:
    """Why this POST must be refused, or None when its origin and token are right."""
    if not same_origin(request):
        return "the form was sent from another site"
    key = cookies.csrf_key(request)
    if key is None or not submitted:
        return "the form has no security token"
    expected = csrf_token(key, cookies.session(request))
    if not hmac.compare_digest(expected.encode(), submitted.encode("utf-8", "replace")):
        return "the form's security token does not match"
    return None
