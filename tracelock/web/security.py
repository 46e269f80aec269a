"""The UI's request checks: the per-start token, cross-site protection, the Host header.

* **Token.** ``tracelock ui`` makes a token when it starts and prints a URL carrying it.
  Opening that URL stores the token in an ``HttpOnly``, ``SameSite=Strict`` cookie; every
  page then needs the cookie (another local user, or a page in another tab that guesses
  the port, reads nothing).
* **Cross-site requests.** A request that changes something (``POST``) needs, besides the
  cookie, a CSRF token derived from the start token (HMAC-SHA256), sent in the form field
  ``csrf`` or the header ``X-Tracelock-CSRF``: a page of another site cannot read it. Its
  ``Origin`` (when sent) must be this server's, and ``Sec-Fetch-Site`` (when sent) must be
  ``same-origin``.
* **Host.** Only the host names the server was started for are answered (a DNS-rebinding
  page would arrive with its own host name).

Every check compares secrets in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tracelock.web.errors import UiRequestRefusedError

__all__ = ["COOKIE", "CSRF_FIELD", "CSRF_HEADER", "Guard", "loopback_hosts"]

COOKIE = "tracelock_ui"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-tracelock-csrf"


def loopback_hosts(host: str, port: int) -> set[str]:
    """The ``Host`` header values a server bound to ``host``:``port`` answers."""
    names = [host, "127.0.0.1", "localhost", "[::1]"] if host in ("127.0.0.1", "localhost", "::1") else [host]
    shown = [f"[{name}]" if ":" in name and not name.startswith("[") else name for name in names]
    return {f"{name}:{port}" for name in shown} | (set(shown) if port in (80, 443) else set())


@dataclass(frozen=True)
class Guard:
    """The checks of one server start."""

    token: str
    hosts: frozenset[str]

    @classmethod
    def create(cls, token: str, hosts: Iterable[str]) -> Guard:
        if len(token) < 16:
            raise ValueError("the UI token must have at least 16 characters")
        return cls(token=token, hosts=frozenset(hosts))

    @property
    def csrf(self) -> str:
        """The CSRF token of this start (derived: the page never shows the start token)."""
        return hmac.new(self.token.encode(), b"tracelock-ui-csrf", hashlib.sha256).hexdigest()

    def host_allowed(self, host: str | None) -> bool:
        return host is not None and host.lower() in self.hosts

    def token_matches(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    def check_session(self, cookie: str | None) -> None:
        if not self.token_matches(cookie):
            raise UiRequestRefusedError(
                "this page needs the token of this start of `tracelock ui`: open the URL it printed",
                details={"reason": "token"},
            )

    def check_change(self, headers: Mapping[str, str], form_token: str | None, origin_expected: str) -> None:
        """A state-changing request: the CSRF token, then where it comes from."""
        given = headers.get(CSRF_HEADER) or form_token
        if given is None or not hmac.compare_digest(given.encode(), self.csrf.encode()):
            raise UiRequestRefusedError("missing or wrong CSRF token", details={"reason": "csrf"})
        origin = headers.get("origin")
        if origin is not None and origin.lower() != origin_expected.lower():
            raise UiRequestRefusedError(f"cross-site request from {origin!r} refused", details={"reason": "origin"})
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise UiRequestRefusedError(f"cross-site request ({site}) refused", details={"reason": "sec-fetch-site"})
