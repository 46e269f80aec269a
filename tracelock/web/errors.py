"""Errors of the local web UI (``tracelock ui``), each with a stable code (docs/errors.md)."""

from __future__ import annotations

from typing import ClassVar

from tracelock.errors import TracelockError, UsageError

__all__ = ["UiError", "UiExtraMissingError", "UiNotFoundError", "UiRequestRefusedError"]


class UiError(TracelockError):
    """Base of the web UI's errors."""

    code: ClassVar[str] = "UI_ERROR"


class UiExtraMissingError(UiError, UsageError):
    """A library of the ``ui`` extra (starlette, jinja2, uvicorn) is not installed."""

    code: ClassVar[str] = "UI_EXTRA_MISSING"


class UiNotFoundError(UiError):
    """A page names a run, step or checkpoint the store does not have, or an id that is not
    one (answered with the 404 page)."""

    code: ClassVar[str] = "UI_NOT_FOUND"


class UiRequestRefusedError(UiError):
    """A request without the per-start token, or a state-changing request that fails the
    cross-site checks (answered 403, nothing recorded)."""

    code: ClassVar[str] = "UI_REQUEST_REFUSED"
