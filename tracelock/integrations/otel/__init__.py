"""OpenTelemetry spans of tracelock runs and steps (optional extra ``otel``).

:func:`instrument` installs a :class:`SpanObserver` on a runtime: every run it drives is an
``invoke_agent {agent}`` span, and each of its steps a child span (``chat {model}``,
``execute_tool {name}``, or the step's kind), attributed by the GenAI semantic conventions
(:mod:`.attributes`) and by tracelock's own. Spans only observe: no trace or span id reaches
the journal or a fingerprint. See ``docs/integrations.md``.
"""

from tracelock.integrations.otel.errors import OtelNotInstalledError
from tracelock.integrations.otel.observer import SpanObserver, instrument, uninstrument

__all__ = ["OtelNotInstalledError", "SpanObserver", "instrument", "uninstrument"]
