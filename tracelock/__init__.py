"""tracelock: provably deterministic execution for AI agents.

The public API is what this module exports; everything else is private by convention.
"""

from tracelock.errors import TracelockError
from tracelock.storage.open import open_store

__all__ = ["TracelockError", "open_store"]
__version__ = "0.1.0"
