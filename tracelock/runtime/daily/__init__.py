"""Daily budgets: limits that span runs, per agent and per tenant, per UTC day, kept as
``budget.spend`` entries of the store's ``tracelock:admin`` chain.

- :mod:`~tracelock.runtime.daily.ledger`: what those entries add up to, the
  ``DailyLedger`` a step's AUTHORIZE phase decides against (a pure fold: no store, no clock).
- :mod:`~tracelock.runtime.daily.journal`: writing a run's spend entries to a store, and
  folding the entries written since the last look into a ledger.
"""
