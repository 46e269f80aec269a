"""Errors of the HTTP capture (codes documented in ``docs/errors.md``)."""

from __future__ import annotations

from typing import ClassVar

from tracelock.errors import RuntimeFault

__all__ = ["CaptureOutsideRunError", "CaptureClientError", "CaptureStreamOpenError"]


class CaptureOutsideRunError(RuntimeFault):
    """A capturing client sent a request outside a run and pass-through is not allowed."""

    code: ClassVar[str] = "CAPTURE_OUTSIDE_RUN"


class CaptureClientError(RuntimeFault):
    """``capture()`` was given something that is not an httpx2/httpx client."""

    code: ClassVar[str] = "CAPTURE_NOT_A_CLIENT"


class CaptureStreamOpenError(RuntimeFault):
    """A step was started on an event loop while a captured async stream read on that loop
    was still open (finish or close the stream first)."""

    code: ClassVar[str] = "CAPTURE_STREAM_OPEN"
