"""Fixtures of the UI tests: a store recorded by real agents, the UI served on a loopback
port in this process, and a real headless Chromium (Debian's, driven by Playwright) that
fails the test on any console error, page error or failed request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg_server import pg_cluster, pg_database, pg_url  # noqa: F401  (the PostgreSQL fixtures)
from tests.web.world import build_world
from tracelock.evidence.verify import load_pinned_keys
from tracelock.web.server import Bound, UiThread, build

REPO = Path(__file__).resolve().parents[2]
#: Screenshots of every page the browser tests open (git-ignored: under build/).
ARTIFACTS = REPO / "build" / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "test-token-" + "0123456789abcdef" * 2


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_world(tmp_path_factory.mktemp("ui-world"))


def serve(store: Any, pins: Any = ()) -> Bound:
    return build(store, TOKEN, pins=pins)


@pytest.fixture(scope="module")
def ui(world: dict[str, Any]) -> Iterator[Bound]:
    """The UI over ``world``'s store, served by uvicorn on a free loopback port."""
    bound = serve(world["store"], load_pinned_keys([str(world["vkey"])]))
    with UiThread(bound):
        yield bound


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (make test does)")
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield instance
        finally:
            instance.close()


class Watched:
    """A page and every console error, page error and failed request it saw."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("requestfailed", lambda request: self.problems.append(f"request failed: {request.url} {request.failure}"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problems.append(f"console: {message.text} at {message.location}")

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def page(browser: Any, ui: Bound) -> Iterator[Watched]:
    """A fresh browser context that has opened the start URL (token in a cookie)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    watched = Watched(context.new_page())
    watched.page.goto(ui.start_url)
    try:
        yield watched
    finally:
        context.close()
    assert not watched.problems, watched.problems
