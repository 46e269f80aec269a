"""An agent package for the scan tests (never imported)."""

from agentpkg.timeutil import iso_now

__all__ = ["iso_now"]
