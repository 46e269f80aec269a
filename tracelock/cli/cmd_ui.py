"""``tracelock ui``: serve the local web UI over a store (the ``ui`` extra)."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import click

from tracelock.cli.common import json_option, print_json, reports_errors, store_option
from tracelock.evidence.verify import load_pinned_keys
from tracelock.storage.open import open_store
from tracelock.web import require_ui_extra


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless told otherwise).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8765, show_default=True, help="Port (0: any free port).")
@click.option("--key", "keys", multiple=True, help="Pinned public key of the checkpoint signer (.vkey, .pub or hex; repeatable).")
@click.option("--quiet", is_flag=True, help="No access log.")
@store_option
@json_option
@reports_errors
def ui_command(host: str, port: int, keys: tuple[str, ...], quiet: bool, store_path: Path, as_json: bool) -> None:
    """Serve the web UI: runs, a run's timeline, diffs, verification, approvals.

    A new token is made at each start; the URL printed carries it once (the page moves it
    into a cookie). Every page needs it, and changes (approve, reject, verify now) also need
    the page's own CSRF token: another site cannot drive the UI. Binds 127.0.0.1 unless
    --host says otherwise. Stop with Ctrl-C."""
    require_ui_extra()
    from tracelock.web.server import build, is_loopback, serve

    pins = load_pinned_keys(keys) if keys else []
    with open_store(store_path, create=False, read_only=True):
        pass  # a location that is not a store is an error now, not on the first page
    bound = build(store_path, secrets.token_urlsafe(32), host=host, port=port, pins=pins)
    document = {"ok": True, "url": bound.start_url, "host": bound.host, "port": bound.port, "store": str(store_path)}
    warning = "" if is_loopback(host) else (
        f"\nwarning: bound to {host}, not loopback: anyone who can reach it and has the URL can read the store"
    )
    if as_json:
        print_json(document)
    else:
        click.echo(
            f"tracelock ui serving {store_path}\n"
            f"open {bound.start_url}\n"
            "(the token in this URL is new at every start; the page keeps it in a cookie)" + warning
        )
    sys.stdout.flush()  # the URL is read before the server's first log line
    serve(bound, quiet=quiet or as_json)


COMMANDS = [ui_command]
