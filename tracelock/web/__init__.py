"""The local web UI (``tracelock ui``): runs, a run's timeline, the diff of two runs,
verification and the approvals queue, served from a store on either backend.

The UI is the optional extra ``tracelock[ui]`` (starlette, jinja2, uvicorn). This package's
``__init__`` imports none of them: :func:`require_ui_extra` says which extra to install
before anything does, and only ``tracelock.web.app`` and ``tracelock.web.server`` import
them. The page data (``tracelock.web.data``) is plain Python over the library's own reads
(``load_run``, ``run_difference``, ``verify_store_checkpoints``, ``Runtime.approve``), so
the pages show what the CLI prints.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from tracelock.web.errors import (
    UiError,
    UiExtraMissingError,
    UiNotFoundError,
    UiRequestRefusedError,
)

__all__ = [
    "UI_LIBRARIES",
    "UiError",
    "UiExtraMissingError",
    "UiNotFoundError",
    "UiRequestRefusedError",
    "require_ui_extra",
]

#: The libraries of the ``ui`` extra, by import name.
UI_LIBRARIES = ("starlette", "jinja2", "uvicorn")


def require_ui_extra(libraries: Sequence[str] = UI_LIBRARIES) -> None:
    """Raise :class:`UiExtraMissingError` naming ``tracelock[ui]`` when a library of the
    extra cannot be imported."""
    missing = []
    for name in libraries:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise UiExtraMissingError(
            f"the web UI needs {', '.join(missing)}: pip install 'tracelock[ui]'",
            details={"missing": missing, "extra": "ui"},
        )
