"""Emergency stops: an operator's prohibition of a tool, or of every tool of a side-effect
class, across every run of a store, kept as ``stop.set`` and ``stop.lift`` entries of the
store's ``tracelock:admin`` chain.

- :mod:`~tracelock.runtime.stops.board`: what those entries add up to, the ``StopBoard``
  a runtime's pipelines consult at AUTHORIZE (a pure fold: no store, no clock).
- :mod:`~tracelock.runtime.stops.journal`: setting and lifting stops in a store, and
  folding the entries written since the last look into a board.
"""
