"""An ``httpx.Client`` that neither keeps nor sends cookies.

A client that authenticates with a bearer token has no use for cookies, and one that
keeps them would send a checkpoint's (or a proxy's) ``Set-Cookie`` back on every later
request. httpx parses every answer for cookies through the standard library's
``http.cookiejar`` (a ``urllib`` request and an ``email`` message built per answer);
:class:`CookielessClient` skips that work as well as the keeping.

Public surfaces only: httpx reads the client's cookies through its ``cookies`` property,
which this overrides; the jar behind httpx's own attribute refuses cookies too, so an
httpx that read that one instead would still keep none.
"""

from __future__ import annotations

import http.cookiejar
from typing import Any

import httpx

__all__ = ["CookielessClient"]


class _NoJar(http.cookiejar.CookieJar):
    """A jar that takes no cookie, from an answer or set by hand."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None


class _NoCookies(httpx.Cookies):
    """httpx's cookies over :class:`_NoJar`: answers are not even parsed for cookies."""

    def __init__(self) -> None:
        super().__init__(_NoJar())

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class CookielessClient(httpx.Client):
    """``httpx.Client`` (same arguments but ``cookies``) keeping no cookie and sending
    none of its own; ``cookies=`` passed to one request (deprecated by httpx, and used
    nowhere here) is still sent with that request."""

    def __init__(self, **kwargs: Any) -> None:
        if "cookies" in kwargs:
            raise TypeError("a cookieless client takes no cookies")
        super().__init__(cookies=_NoJar(), **kwargs)
        self._no_cookies = _NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        raise AttributeError("a cookieless client keeps no cookies")
