"""Errors of the OpenTelemetry adapter (codes documented in ``docs/errors.md``)."""

from __future__ import annotations

from typing import ClassVar

from tracelock.errors import RuntimeFault

__all__ = ["OtelNotInstalledError"]


class OtelNotInstalledError(RuntimeFault):
    """The OpenTelemetry API or SDK is not installed and the adapter was used
    (``pip install 'tracelock[otel]'``)."""

    code: ClassVar[str] = "OTEL_NOT_INSTALLED"
