"""Integrations: tracelock doors over the libraries agents already use.

``tracelock.integrations.http`` captures HTTP at the transport of ``httpx2`` (the official
``openai`` and ``anthropic`` SDKs) and ``httpx``: every request made inside a run is a step
of the run's pipeline; ``tracelock.integrations.otel`` makes OpenTelemetry spans of runs and
steps. See ``docs/integrations.md``. The libraries are optional extras,
imported only by the module that needs them.
"""
