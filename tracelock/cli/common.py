"""What every CLI command shares: ``--json``, ``--store``, exit codes, error reporting.

Exit codes a CI can rely on: 0 ok, 1 a check failed, 2 usage or input error; 130 when
interrupted (Ctrl-C).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tracelock.errors import TracelockError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
#: Interrupted (Ctrl-C), as a shell reports SIGINT: 128 + 2.
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])


def json_option(func: F) -> F:
    """Add ``--json``: print one JSON document on stdout instead of text."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print a JSON document instead of text."
    )(func)


class _StoreLocation(click.Path):
    """A store directory, or a server URL kept as written (a ``Path`` would fold its ``//``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "://" in value:
            return value
        return super().convert(value, param, ctx)


def store_option(func: F) -> F:
    """Add ``--store DIR`` or ``--store postgresql://...`` (or ``TRACELOCK_STORE``), default
    ``./.tracelock``. Whether the directory can be read is the store's to say, with its
    error code (``STORE_PERMISSION_DENIED``), not click's."""
    return click.option(
        "--store",
        "store_path",
        type=_StoreLocation(path_type=Path, file_okay=False, readable=False),
        envvar="TRACELOCK_STORE",
        default=Path(".tracelock"),
        show_default=True,
        help="Store directory or postgresql:// URL (env: TRACELOCK_STORE).",
    )(func)


def json_text(value: Any) -> str:
    """A value as it is printed in text output: JSON (``true``, ``null``, ``"x"``), on one line."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)


def print_json(document: Any) -> None:
    """Write ``document`` as indented JSON with sorted keys (stable for diffs and CI)."""
    click.echo(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False))


def emit(as_json: bool, document: dict[str, Any], text: Callable[[], str] | str) -> None:
    """Print either the JSON document or the human text."""
    if as_json:
        print_json(document)
    else:
        click.echo(text() if callable(text) else text)


def reports_errors(func: F) -> F:
    """Turn a :class:`TracelockError` escaping a command into a clear message and exit 2.

    With ``--json`` the error is printed as ``{"ok": false, "error": {...}}`` on stdout. A
    file the system refused (``OSError``) that no layer turned into a coded error is
    reported the same way, with the code its cause has for a store file (a full device,
    permission denied, a read-only file system...), never as a traceback.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TracelockError as exc:
            report_error(exc, as_json=bool(kwargs.get("as_json")))
        except OSError as exc:
            # Imported here: a command that never opens a store loads no storage module.
            from tracelock.storage.failures import file_error

            report_error(file_error(exc, "a file could not be used"), as_json=bool(kwargs.get("as_json")))

    return wrapper  # type: ignore[return-value]


def report_error(exc: TracelockError, *, as_json: bool) -> None:
    """Print ``exc`` as ``error [CODE]: message`` (or its JSON document) and exit 2."""
    if as_json:
        print_json({"ok": False, "error": exc.to_dict()})
    else:
        click.echo(f"error [{exc.code}]: {exc.message}", err=True)
    sys.exit(EXIT_USAGE)
