"""Connection strings: which locations are PostgreSQL's, and how to show one without its password."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["SCHEMES", "is_postgres_location", "redact_location", "scrub"]

SCHEMES = ("postgresql", "postgres")
_HIDDEN = "***"


def is_postgres_location(location: str) -> bool:
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def _secrets(location: str) -> list[str]:
    """Every form of the password the location carries (as written, decoded, re-encoded)."""
    found: list[str] = []
    try:
        parts = urlsplit(location)
        raw = parts.netloc.rpartition("@")[0].partition(":")[2] if "@" in parts.netloc else ""
        candidates = [raw] + [value for key, value in parse_qsl(parts.query, keep_blank_values=True) if key == "password"]
        candidates += [item.partition("password=")[2] for item in parts.query.split("&") if item.startswith("password=")]
    except ValueError:
        candidates = []
    for candidate in candidates:
        for form in (candidate, unquote(candidate), quote(unquote(candidate), safe="")):
            if form and form not in found:
                found.append(form)
    # Longest first, so that a secret containing another is replaced whole.
    return sorted(found, key=len, reverse=True)


def scrub(text: str, location: str) -> str:
    """``text`` with every form of ``location``'s password replaced by ``***``."""
    for secret in _secrets(location):
        text = text.replace(secret, _HIDDEN)
    return text


def redact_location(location: str) -> str:
    """The location as it may be shown: the password (in the user part or a ``password``
    parameter) replaced by ``***``."""
    try:
        parts = urlsplit(location)
    except ValueError:
        return scrub(location, location)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{_HIDDEN}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(key, _HIDDEN if key == "password" else value) for key, value in pairs], safe="/*")
    return scrub(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)), location)
