"""The Starlette application of ``tracelock ui``: routes, templates, error pages.

Pages are rendered on the server with Jinja2 (autoescape on for every template: a value
from the store is text, never markup); htmx (vendored under ``static/``) refreshes the runs
table and posts the forms, with no build step. Every store read goes through
:class:`StoreSource` (a fresh read-only handle per request); the data of each page comes
from ``tracelock.web.data``. Errors never show a traceback: an unknown run is the 404
page, a store that cannot be read the 503 page with its error code, anything else the
500 page.
"""

from __future__ import annotations

import datetime
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tracelock.errors import TracelockError
from tracelock.evidence.verify import PinnedKey
from tracelock.web.data.approvals import approval_queue, decide
from tracelock.web.data.diff import load_diff, load_drift
from tracelock.web.data.run import check_run_id, load_run_view, marked
from tracelock.web.data.runs import OUTCOMES, PER_PAGE, STATUSES, RunFilters, runs_page
from tracelock.web.data.verify import checkpoint_status, prove_run, verify_now
from tracelock.web.errors import UiNotFoundError, UiRequestRefusedError
from tracelock.web.security import COOKIE, CSRF_FIELD, Guard
from tracelock.web.source import StoreSource

__all__ = ["UiConfig", "create_app"]

HERE = Path(__file__).resolve().parent
_log = logging.getLogger("tracelock.web")
#: How often the runs table asks for new runs (htmx polling), in seconds.
POLL_SECONDS = 2


class UiConfig:
    """What one start of the UI serves: the store, the guard (token, hosts), pinned keys."""

    def __init__(self, source: StoreSource, guard: Guard, pins: Sequence[PinnedKey] = ()) -> None:
        self.source = source
        self.guard = guard
        self.pins = list(pins)


# -- template helpers ----------------------------------------------------------------------
def _ts(ms: Any) -> str:
    if not isinstance(ms, int) or ms <= 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def _duration(ms: Any) -> str:
    if not isinstance(ms, int):
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    return f"{ms // 60_000} min {ms % 60_000 // 1000} s"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=repr)


def _short(value: Any, length: int = 12) -> str:
    return "-" if value is None else str(value)[:length]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ts=_ts, duration=_duration, pretty=_pretty, short=_short, marked=marked)
    env.globals.update(statuses=STATUSES, outcomes=OUTCOMES, poll_seconds=POLL_SECONDS)
    return env


# -- the application -----------------------------------------------------------------------
def create_app(config: UiConfig) -> Starlette:
    """The ASGI application serving ``config``'s store."""
    env = _environment()
    guard = config.guard
    source = config.source

    def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        page = env.get_template(template).render(
            request=request,
            csrf=guard.csrf,
            store=source.shown,
            backend=source.backend,
            **context,
        )
        return HTMLResponse(page, status_code=status_code)

    def int_param(request: Request, name: str, default: int) -> int:
        text = request.query_params.get(name, "")
        return int(text) if text.isdigit() and len(text) < 9 else default

    # -- pages ---------------------------------------------------------------------------
    def runs(request: Request) -> Response:
        filters = RunFilters.from_query(dict(request.query_params))
        page_number = int_param(request, "page", 1)
        with source.reading() as store:
            page = runs_page(store, filters, page_number, PER_PAGE)
        template = "runs_rows.html" if request.url.path == "/rows" else "runs.html"
        return render(request, template, page=page, filters=filters, query=filters.to_query(), nav="runs")

    def run(request: Request) -> Response:
        run_id = check_run_id(request.path_params["run_id"])
        with source.reading() as store:
            view = load_run_view(store, run_id)
        return render(request, "run.html", view=view, nav="runs")

    def diff(request: Request) -> Response:
        a, b = request.query_params.get("a", "").strip(), request.query_params.get("b", "").strip()
        if not a or not b:
            return render(request, "diff_pick.html", a=a, b=b, nav="diff")
        with source.reading() as store:
            view = load_diff(store, a, b)
        return render(request, "diff.html", view=view, nav="diff")

    def drift(request: Request) -> Response:
        run_id = check_run_id(request.path_params["run_id"])
        with source.reading() as store:
            view = load_drift(store, run_id)
        return render(request, "drift.html", view=view, nav="diff")

    def verify(request: Request) -> Response:
        run_id = request.query_params.get("run", "").strip()
        with source.reading() as store:
            status = checkpoint_status(store, config.pins)
            proof = prove_run(store, run_id) if run_id else None
        return render(request, "verify.html", status=status, proof=proof, verdict=None, pins=config.pins, nav="verify")

    async def verify_post(request: Request) -> Response:
        await _check_change(request)
        return await _in_thread(_verify_now_page, request)

    def _verify_now_page(request: Request) -> Response:
        with source.reading() as store:
            status = checkpoint_status(store, config.pins)
            verdict = verify_now(store, config.pins)
        template = "verdict.html" if request.headers.get("hx-request") else "verify.html"
        return render(request, template, status=status, proof=None, verdict=verdict, pins=config.pins, nav="verify")

    def approvals(request: Request) -> Response:
        with source.reading() as store:
            queue = approval_queue(store)
        done = request.query_params.get("done", "")
        return render(request, "approvals.html", queue=queue, done=done[:300], nav="approvals")

    async def approvals_post(request: Request) -> Response:
        form = await _check_change(request)
        run_id = check_run_id(request.path_params["run_id"])
        step_text = request.path_params["step"]
        decision = str(form.get("decision", ""))
        by = str(form.get("by", "")).strip()
        reason = str(form.get("reason", "")).strip()
        if decision not in ("approve", "reject") or not step_text.isdigit() or len(step_text) > 9:
            raise HTTPException(400, "the decision must be approve or reject, for a step number")
        if not by:
            return await _in_thread(_approvals_error, request, "say who decides (the by field): it is recorded")

        def record() -> None:
            with source.exclusive():
                decide(source.location, run_id, int(step_text), approve=decision == "approve", by=by, reason=reason)

        try:
            await run_in_threadpool(record)
        except TracelockError as exc:
            return await _in_thread(_approvals_error, request, f"[{exc.code}] {exc.message}")
        word = "approved" if decision == "approve" else "rejected"
        url = URL("/approvals").include_query_params(done=f"run {run_id} step {step_text}: {word} by {by}")
        return RedirectResponse(str(url), status_code=303)

    def _approvals_error(request: Request, message: str) -> Response:
        with source.reading() as store:
            queue = approval_queue(store)
        return render(request, "approvals.html", status_code=400, queue=queue, done="", error=message, nav="approvals")

    async def _check_change(request: Request) -> dict[str, str]:
        form = await _form(request)
        origin = f"{request.url.scheme}://{request.headers.get('host', '')}"
        guard.check_change(request.headers, form.get(CSRF_FIELD), origin)
        return form

    # -- errors --------------------------------------------------------------------------
    async def not_found(request: Request, exc: Exception) -> Response:
        message = exc.message if isinstance(exc, UiNotFoundError) else "there is no such page"
        if isinstance(exc, HTTPException) and exc.status_code != 404:
            return render(request, "error.html", status_code=exc.status_code, title=f"Error {exc.status_code}", message=str(exc.detail), code=None)
        return render(request, "error.html", status_code=404, title="Not found", message=message, code="UI_NOT_FOUND")

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, UiRequestRefusedError)
        return render(request, "error.html", status_code=403, title="Refused", message=exc.message, code=exc.code)

    async def store_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, TracelockError)
        if exc.code == "RUN_NOT_FOUND":
            return render(request, "error.html", status_code=404, title="Not found", message=exc.message, code=exc.code)
        return render(request, "error.html", status_code=503, title="The store cannot be read", message=exc.message, code=exc.code)

    async def server_error(request: Request, exc: Exception) -> Response:
        _log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        page = env.get_template("error.html").render(
            request=request, csrf="", store=source.shown, backend=source.backend, nav="",
            title="Internal error", message="something went wrong while building this page; the details are in the server's log", code=None,
        )
        return HTMLResponse(page, status_code=500)

    routes = [
        Route("/", runs),
        Route("/rows", runs),
        Route("/runs/{run_id:path}", run),
        Route("/diff", diff),
        Route("/drift/{run_id:path}", drift),
        Route("/verify", verify, methods=["GET"]),
        Route("/verify", verify_post, methods=["POST"]),
        Route("/approvals", approvals, methods=["GET"]),
        Route("/approvals/{run_id}/{step}", approvals_post, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_Gate, guard=guard)],
        exception_handlers={
            404: not_found,
            400: not_found,
            405: not_found,
            413: not_found,
            UiNotFoundError: not_found,
            UiRequestRefusedError: refused,
            TracelockError: store_error,
            500: server_error,
            Exception: server_error,
        },
    )


#: The largest form body accepted (a decision's reason is short text).
MAX_FORM_BYTES = 64 * 1024


async def _form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the only kind the pages send), parsed
    without the multipart library; the first value of each field."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise HTTPException(413, "form too large")
    if content_type != "application/x-www-form-urlencoded":
        return {}
    try:
        pairs = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise HTTPException(400, "the form is not UTF-8") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        form.setdefault(key, value)
    return form


async def _in_thread(func: Callable[..., Response], *args: Any) -> Response:
    return await run_in_threadpool(func, *args)


_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class _Gate(BaseHTTPMiddleware):
    """Host check, then the token (from the start URL once, then the cookie), then
    security headers on every answer."""

    def __init__(self, app: Any, guard: Guard) -> None:
        super().__init__(app)
        self.guard = guard

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await self._answer(request, call_next)
        for name, value in _HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _answer(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if not self.guard.host_allowed(request.headers.get("host")):
            return PlainTextResponse("unexpected Host header", status_code=400)
        given = request.query_params.get("token")
        if given is not None and request.method == "GET":
            if not self.guard.token_matches(given):
                return _refusal("the token in this URL is not the one of this start of `tracelock ui`")
            # Out of the address bar (and history) at once, into an HttpOnly cookie.
            rest = [(key, value) for key, value in request.query_params.multi_items() if key != "token"]
            target = request.url.replace(query="").include_query_params(**dict(rest)) if rest else request.url.replace(query="")
            redirect = RedirectResponse(target.path + (f"?{target.query}" if target.query else ""), status_code=303)
            redirect.set_cookie(COOKIE, self.guard.token, httponly=True, samesite="strict", path="/")
            return redirect
        if request.url.path.startswith("/static/"):
            return await call_next(request)
        if not self.guard.token_matches(request.cookies.get(COOKIE)):
            return _refusal("open the URL `tracelock ui` printed when it started: it carries this start's token")
        return await call_next(request)


def _refusal(message: str) -> Response:
    body = (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>tracelock: token needed</title>"
        '<link rel="stylesheet" href="/static/style.css"></head><body><main class="narrow">'
        f"<h1>Token needed</h1><p class=\"bad\">{_escape(message)}</p></main></body></html>"
    )
    return HTMLResponse(body, status_code=403)


def _escape(text: str) -> str:
    return str(markupsafe.escape(text))
