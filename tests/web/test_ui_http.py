"""The UI over HTTP (Starlette's TestClient, the app in process): the token, CSRF and
cross-site refusals, the Host check, escaping of store values, 404 pages for unknown and
malformed run ids, a 500 page without a traceback, approvals recorded like the CLI's."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from tests.web.conftest import TOKEN, serve
from tests.web.world import SCRIPT_ANSWER
from tracelock.cli.main import cli
from tracelock.runtime.records import load_run
from tracelock.storage.open import open_store
from tracelock.web import UiExtraMissingError, require_ui_extra
from tracelock.web.server import Bound

STATIC = Path(__file__).resolve().parents[2] / "tracelock" / "web" / "static"


def client_for(bound: Bound, *, login: bool = True) -> TestClient:
    client = TestClient(bound.app, base_url=bound.base_url, raise_server_exceptions=False, follow_redirects=False)
    if login:
        response = client.get(f"/?token={TOKEN}")
        assert response.status_code == 303 and response.headers["location"] == "/"
        assert "httponly" in response.headers["set-cookie"].lower()
        assert "samesite=strict" in response.headers["set-cookie"].lower()
    return client


@pytest.fixture(scope="module")
def bound(world: dict[str, Any]) -> Bound:
    return serve(world["store"])


@pytest.fixture
def client(bound: Bound) -> Iterator[TestClient]:
    with client_for(bound) as c:
        yield c


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def test_every_page_needs_the_start_token(bound: Bound) -> None:
    anonymous = client_for(bound, login=False)
    for path in ("/", "/runs/run-xss", "/approvals", "/verify", "/diff?a=run-quote-a&b=run-quote-b"):
        response = anonymous.get(path)
        assert response.status_code == 403, path
        assert "run-xss" not in response.text and "Token needed" in response.text
    wrong = anonymous.get("/?token=not-the-token-of-this-start")
    assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
    anonymous.cookies.set("tracelock_ui", "forged-value-forged-value")
    assert anonymous.get("/").status_code == 403
    # The vendored script is public: it needs no token.
    assert anonymous.get("/static/htmx.min.js").status_code == 200


def test_the_token_leaves_the_url_and_filters_are_kept(bound: Bound) -> None:
    anonymous = client_for(bound, login=False)
    response = anonymous.get(f"/runs/run-xss?token={TOKEN}")
    assert response.status_code == 303 and response.headers["location"] == "/runs/run-xss"
    response = anonymous.get(f"/?status=failed&token={TOKEN}")
    assert response.headers["location"] == "/?status=failed"


def test_unexpected_host_is_refused(bound: Bound) -> None:
    client = client_for(bound)
    response = client.get("/", headers={"host": "evil.example:80"})
    assert response.status_code == 400


def test_security_headers(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


def test_store_values_are_escaped(client: TestClient) -> None:
    page = client.get("/runs/run-xss").text
    assert "<script>alert(" not in page
    assert "&lt;script&gt;alert(&#39;answer&#39;)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert SCRIPT_ANSWER not in page  # only ever in its escaped form
    # The only script element of any page is the vendored htmx.
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/htmx.min.js" defer>']


def test_unknown_and_malformed_run_ids_are_404_pages(client: TestClient) -> None:
    for path in (
        "/runs/run-does-not-exist",
        "/runs/tracelock:admin",
        "/runs/%00%01",
        "/runs/../../etc/passwd",
        "/runs/" + "x" * 500,
        "/runs/<script>",
        "/drift/nope",
        "/diff?a=run-quote-a&b=nope",
        "/diff?a=%22%3E%3Cscript%3E&b=run-quote-a",
        "/verify?run=nope",
        "/no/such/page",
    ):
        response = client.get(path)
        assert response.status_code == 404, (path, response.status_code)
        assert "Traceback" not in response.text and "<script>" not in response.text.replace(
            '<script src="/static/htmx.min.js" defer>', ""
        ), path
        assert "Not found" in response.text


def test_a_store_that_cannot_be_opened_is_a_503_page_with_its_code(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "store.json").write_text('{"format": "tracelock-store", "version": 999}')
    with client_for(serve(broken)) as client:
        response = client.get("/")
    assert response.status_code == 503
    assert "STORE_FORMAT" in response.text and "Traceback" not in response.text


def test_an_unexpected_failure_is_a_500_page_without_traceback(tmp_path: Path) -> None:
    # Entries no runtime writes (an effect without its step number): reading the run fails
    # inside the page with a plain Python error.
    with open_store(tmp_path / "odd") as store:
        store.append("run-odd", "run.start", payload={"agent": "a", "input": None}, meta={"agent": "a", "status": "running"}, new_run=True)
        store.append("run-odd", "effect", payload={"kind": "tool", "name": "t"})
    with client_for(serve(tmp_path / "odd")) as client:
        response = client.get("/runs/run-odd")
    assert response.status_code == 500
    assert "Internal error" in response.text
    assert "Traceback" not in response.text and "KeyError" not in response.text and 'File "' not in response.text


def test_state_changes_need_the_csrf_token_and_the_same_origin(world: dict[str, Any], client: TestClient) -> None:
    page = client.get("/approvals").text
    csrf = csrf_of(page)
    target = f"/approvals/{world['wait_approve']}/0"
    form = {"decision": "approve", "by": "mallory", "reason": "x"}
    refused = [
        client.post(target, data=form),  # no CSRF token
        client.post(target, data=form | {"csrf": "0" * 64}),  # a wrong one
        client.post(target, data=form | {"csrf": csrf}, headers={"origin": "http://evil.example"}),
        client.post(target, data=form | {"csrf": csrf}, headers={"sec-fetch-site": "cross-site"}),
    ]
    assert [response.status_code for response in refused] == [403, 403, 403, 403]
    assert all("Refused" in response.text for response in refused)
    anonymous = client_for(serve(world["store"]), login=False)
    assert anonymous.post(target, data=form | {"csrf": csrf}).status_code == 403  # no session cookie
    with open_store(world["store"], create=False, read_only=True) as store:
        record = load_run(store, world["wait_approve"])
    assert record.approvals == {} and record.status == "awaiting_approval"


def test_an_approval_is_recorded_like_the_cli_records_it(world: dict[str, Any], client: TestClient, tmp_path: Path) -> None:
    csrf = csrf_of(client.get("/approvals").text)
    response = client.post(
        f"/approvals/{world['wait_reject']}/0",
        data={"csrf": csrf, "decision": "reject", "by": "alice", "reason": "wrong box <b>"},
        headers={"origin": client.base_url.__str__().rstrip("/")},
    )
    assert response.status_code == 303
    shown = client.get(response.headers["location"]).text
    assert "rejected by alice" in shown and world["wait_reject"] in shown
    with open_store(world["store"], create=False, read_only=True) as store:
        record = load_run(store, world["wait_reject"])
        entry = store.entries(world["wait_reject"])[-1]
    assert record.approvals[0] == {"step": 0, "decision": "rejected", "by": "alice", "reason": "wrong box <b>"}
    assert entry.kind == "approval"
    # The same decision through the CLI on a copy would write the same document.
    again = client.post(
        f"/approvals/{world['wait_reject']}/0", data={"csrf": csrf, "decision": "approve", "by": "bob", "reason": ""}
    )
    assert (again.status_code == 400 and "RUN_STATE" in again.text) or "does not wait" in again.text
    missing_by = client.post(f"/approvals/{world['wait_approve']}/0", data={"csrf": csrf, "decision": "approve", "by": " "})
    assert missing_by.status_code == 400


def test_cli_and_ui_decisions_journal_the_same_payload(tmp_path: Path) -> None:
    from tests.web.world import build_world

    ids = build_world(tmp_path / "w")
    result = CliRunner().invoke(
        cli, ["approve", ids["wait_approve"], "0", "--by", "carol", "--reason", "ok", "--store", str(ids["store"])]
    )
    assert result.exit_code == 0, result.output
    bound = serve(ids["store"])
    with client_for(bound) as client:
        csrf = csrf_of(client.get("/approvals").text)
        response = client.post(
            f"/approvals/{ids['wait_reject']}/0", data={"csrf": csrf, "decision": "approve", "by": "carol", "reason": "ok"}
        )
        assert response.status_code == 303
    with open_store(ids["store"], create=False, read_only=True) as store:
        by_cli = store.get_payload(store.entries(ids["wait_approve"])[-1].payload or "")
        by_ui = store.get_payload(store.entries(ids["wait_reject"])[-1].payload or "")
    assert by_cli == by_ui == {"step": 0, "decision": "approved", "by": "carol", "reason": "ok"}


def test_runs_filters_and_pagination(client: TestClient, world: dict[str, Any]) -> None:
    def shown(query: str) -> list[str]:
        return re.findall(r'data-run="([^"]+)"', client.get("/?" + query).text)

    everything = shown("")
    assert set(everything) >= {world["support"], world["xss"], world["quote_a"], world["wait_approve"]}
    assert shown("status=awaiting_approval") == [] or set(shown("status=awaiting_approval")) <= {
        world["wait_approve"],
        world["wait_reject"],
    }
    assert world["quote_a"] in shown("q=quote-a") and world["xss"] not in shown("q=quote-a")
    assert set(shown("agent=quoting")) == {world["quote_a"], world["quote_b"], world["quote_c"], world["fork"], world["redacted"]}
    assert set(shown("outcome=SUCCESS")) >= {world["support"], world["quote_a"]}
    assert world["wait_approve"] not in shown("outcome=SUCCESS")
    assert shown("outcome=DENIED") == []
    # Polling asks the rows only.
    rows = client.get("/rows?agent=quoting")
    assert rows.status_code == 200 and rows.text.lstrip().startswith("<tbody")


def test_pages_answer_on_a_postgres_store(pg_url: str, world: dict[str, Any]) -> None:
    """The read pages on the PostgreSQL backend (a copy of the world's store)."""
    result = CliRunner().invoke(cli, ["store", "copy", str(world["store"]), pg_url, "--json"])
    assert result.exit_code == 0, result.output
    bound = serve(pg_url)
    with client_for(bound) as client:
        runs = client.get("/")
        assert runs.status_code == 200 and world["quote_a"] in runs.text
        assert "postgresql store" in runs.text and "password" not in runs.text.lower()
        run = client.get(f"/runs/{world['xss']}")
        assert run.status_code == 200 and "&lt;script&gt;" in run.text
        diff = client.get(f"/diff?a={world['quote_a']}&b={world['quote_b']}")
        assert diff.status_code == 200 and "first divergence" in diff.text
        assert client.get("/approvals").status_code == 200
        # Verification works on PostgreSQL too; `store copy` keeps the source's checkpoint
        # history, so the run is proved included in the copied checkpoint.
        verify = client.get(f"/verify?run={world['quote_a']}")
        assert verify.status_code == 200 and "no checkpoint yet" not in verify.text
        assert "Run verified" in verify.text and "proved included in checkpoint 1" in verify.text
        verdict = client.post("/verify", data={"csrf": csrf_of(verify.text)}, headers={"hx-request": "true"})
        assert verdict.status_code == 200 and "every hash and chain link checks" in verdict.text
        assert client.get("/runs/nope").status_code == 404


def test_vendored_htmx_is_the_recorded_file() -> None:
    notes = (STATIC / "VENDORED.md").read_text()
    digest = hashlib.sha256((STATIC / "htmx.min.js").read_bytes()).hexdigest()
    assert f"`{digest}`" in notes and "2.0.11" in notes
    assert "Zero-Clause BSD" in (STATIC / "htmx.LICENSE").read_text()


def test_missing_extra_names_it(tmp_path: Path) -> None:
    """In a process where uvicorn cannot be imported, ``tracelock ui`` exits 2 naming the extra."""
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from tracelock.cli.main import main\n"
        f"sys.argv = ['tracelock', 'ui', '--json', '--store', {str(tmp_path)!r}]\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "UI_EXTRA_MISSING" and "tracelock[ui]" in error["message"]
    assert error["details"]["missing"] == ["uvicorn"]
    with pytest.raises(UiExtraMissingError):
        sys.modules["uvicorn_missing_probe"] = None  # type: ignore[assignment]
        try:
            require_ui_extra(("uvicorn_missing_probe",))
        finally:
            del sys.modules["uvicorn_missing_probe"]


def test_the_ui_command_serves_and_prints_its_start_url(world: dict[str, Any]) -> None:
    """``tracelock ui --port 0 --json`` in its own process: the URL it prints opens a session."""
    import urllib.error
    import urllib.request

    process = subprocess.Popen(
        [sys.executable, "-c", "from tracelock.cli.main import main; main()", "ui", "--port", "0", "--json", "--store", str(world["store"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "}":
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else ""
            lines.append(line.rstrip("\n"))
        started = json.loads("\n".join(lines))
        assert started["host"] == "127.0.0.1" and started["url"].startswith(f"http://127.0.0.1:{started['port']}/?token=")

        class Keep(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any) -> None:
                return None

        opener = urllib.request.build_opener(Keep)
        for _ in range(100):
            try:
                opener.open(started["url"], timeout=10)
            except urllib.error.HTTPError as answer:
                assert answer.code == 303
                cookie = answer.headers["set-cookie"].split(";", 1)[0]
                break
            except urllib.error.URLError:
                continue
        request = urllib.request.Request(started["url"].split("?", 1)[0], headers={"cookie": cookie})
        with urllib.request.urlopen(request, timeout=10) as page:
            assert world["support"] in page.read().decode()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_verify_now_is_red_and_says_what_failed_on_an_altered_journal(world: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "altered"
    shutil.copytree(world["store"], copy, ignore=shutil.ignore_patterns("lock"))
    journal = copy / "journal.log"
    data = journal.read_bytes()
    assert data.count(b"A-1001") >= 1
    journal.write_bytes(data.replace(b"A-1001", b"A-1009", 1))  # same length: a quiet edit
    with client_for(serve(copy)) as client:
        csrf = csrf_of(client.get("/verify").text)
        response = client.post("/verify", data={"csrf": csrf}, headers={"hx-request": "true"})
    assert response.status_code == 200
    assert 'class="verdict fail"' in response.text and "Verification FAILED" in response.text
    failure = re.search(r'<div class="failure">(.*?)</div>', response.text, re.S)
    assert failure is not None and re.search(r"\[[A-Z_]+\] at seq \d+", failure.group(1)), response.text


def test_verify_now_with_a_pinned_key_and_no_checkpoint_names_the_code(world: dict[str, Any], tmp_path: Path) -> None:
    """No checkpoint to check the pinned key against: a red verdict that says so, with its
    code, not a 500."""
    import shutil

    from tracelock.evidence.verify import load_pinned_keys

    copy = tmp_path / "unsigned"
    shutil.copytree(world["store"], copy, ignore=shutil.ignore_patterns("lock"))
    shutil.rmtree(copy / "checkpoints")
    with client_for(serve(copy, load_pinned_keys([str(world["vkey"])]))) as client:
        csrf = csrf_of(client.get("/verify").text)
        response = client.post("/verify", data={"csrf": csrf}, headers={"hx-request": "true"})
    assert response.status_code == 200, response.text
    assert 'class="verdict fail"' in response.text
    failure = re.search(r'<div class="failure">(.*?)</div>', response.text, re.S)
    assert failure is not None and "[EVIDENCE_CHECKPOINT_NOT_FOUND]" in failure.group(1), response.text
