"""Provenance: what produced a run (the engine and its environment, the agent's code, the
tools' definitions), recorded in the run's start entry outside the fingerprint."""
