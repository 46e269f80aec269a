"""The UI in a real headless Chromium: each page opened, a run, a diff, a verification and
an approval clicked through, what a person sees asserted, a screenshot of each page kept
under build/test-artifacts/ui/. Any console error, page error or failed request fails the
test (the ``page`` fixture)."""

from __future__ import annotations

from typing import Any

from tests.web.conftest import Watched
from tests.web.world import SCRIPT_ANSWER
from tracelock.runtime.runtime import Runtime
from tracelock.storage.errors import StoreLockedError
from tracelock.web.server import Bound


def test_runs_page_lists_filters_and_shows_new_runs_without_reload(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    p.wait_for_selector("table.runs")
    assert p.title() == "Runs · tracelock"
    rows = p.locator("tr.run-row")
    assert rows.count() >= 10
    support_row = p.locator(f'tr.run-row[data-run="{world["support"]}"]')
    assert "completed" in support_row.inner_text() and "SUCCESS" in support_row.inner_text()
    assert "support-triage" in support_row.inner_text()
    waiting = p.locator(f'tr.run-row[data-run="{world["wait_approve"]}"]')
    assert "awaiting_approval" in waiting.inner_text() or "running" in waiting.inner_text()
    page.shot("runs")

    p.select_option("select[name=status]", "completed")
    p.fill("input[name=agent]", "quoting")
    p.click("form.filters button[type=submit]")
    p.wait_for_url("**/?status=completed&agent=quoting**")
    shown = set(p.locator("tr.run-row").evaluate_all("rows => rows.map(r => r.dataset.run)"))
    assert shown == {world["quote_a"], world["quote_b"], world["quote_c"], world["fork"], world["redacted"]}
    page.shot("runs-filtered")

    # A run recorded while the page is open appears without a reload (htmx polling).
    p.goto(ui.base_url + "/")
    p.wait_for_selector("tr.run-row")
    from tests.web.world import QUOTE_POLICY, pricing, quoting

    runtime = None
    for _ in range(50):
        try:
            runtime = Runtime(world["store"], QUOTE_POLICY, toolkits=(pricing,))
            break
        except StoreLockedError:
            # The UI's reader holds the store's lock for the few milliseconds of a request
            # (docs/ui.md); a writer opening then is refused, as beside any reader.
            p.wait_for_timeout(20)
    assert runtime is not None
    try:
        runtime.run(quoting, {"item": "kb", "qty": 9}, run_id="run-appears-live")
    finally:
        runtime.close()
        runtime.store.close()
    p.wait_for_selector('tr.run-row[data-run="run-appears-live"]', timeout=15_000)
    assert p.locator("tr.run-row").first.get_attribute("data-run") == "run-appears-live"


def test_a_run_page_shows_timeline_llm_policy_and_fingerprint(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    p.goto(ui.base_url + "/")
    p.click(f'a[href="/runs/{world["support"]}"]')
    p.wait_for_selector("h1:has-text('Run')")
    assert world["support"] in p.locator("h1").inner_text()
    steps = p.locator("details.step")
    assert steps.count() == 5
    header = steps.nth(3).locator("summary").inner_text()
    for text in ("proposal", "issue_refund", "irreversible", "AUTHORIZE", "DENIED", "POLICY_ARGUMENT_REJECTED"):
        assert text in header, (text, header)
    # Expand the LLM call: messages and the answer.
    steps.nth(0).locator("summary").click()
    llm = steps.nth(0).locator(".llm")
    assert llm.is_visible()
    assert "You are a careful support agent." in llm.inner_text()
    assert "demo-planner" in llm.inner_text()
    # The denied step: the policy's reason.
    steps.nth(3).locator("summary").click()
    assert "violates max = 5000" in steps.nth(3).inner_text()
    # The idempotent write: its idempotency key.
    steps.nth(4).locator("summary").click()
    assert "tlk-" in steps.nth(4).inner_text()
    fingerprint = p.locator("h2:has-text('Fingerprint') + .panel")
    assert "matches" in fingerprint.inner_text() and "lookup_order" in fingerprint.inner_text()
    page.shot("run-support")


def test_llm_html_is_shown_as_text_not_run(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    dialogs: list[str] = []

    def opened(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    p.on("dialog", opened)
    p.goto(ui.base_url + f"/runs/{world['xss']}")
    p.locator("details.step").first.locator("summary").click()
    answer = p.locator("pre.llm-answer")
    assert answer.inner_text() == SCRIPT_ANSWER
    assert p.locator("main script").count() == 0 and p.locator("main b").count() == 0
    assert "<img src=x onerror=alert(1)>" in p.locator("pre.input").inner_text()
    assert dialogs == []
    page.shot("run-llm-html-escaped")


def test_a_streamed_llm_answer_shows_its_chunks(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    p.goto(ui.base_url + f"/runs/{world['stream']}")
    step = p.locator("details.step").first
    assert "llm" in step.locator("summary").inner_text() and "SUCCESS" in step.locator("summary").inner_text()
    step.locator("summary").click()
    llm = step.locator(".llm")
    assert "gpt-test" in llm.inner_text() and "tell me three words" in llm.inner_text()
    assert p.locator("pre.llm-answer").inner_text() == "echo: tell me three words "
    chunks = step.locator("ol.chunks li")
    assert chunks.count() >= 2 and "streamed in" in llm.inner_text()
    assert "data: " in chunks.first.inner_text()
    page.shot("run-streamed-llm")


def test_redacted_payloads_show_as_redacted_and_forks_link_to_parents(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    p.goto(ui.base_url + f"/runs/{world['redacted']}")
    assert "redacted" in p.locator("details.step").first.locator("summary").inner_text()
    gone = p.locator("text=Entries whose payload is gone")
    assert gone.is_visible()
    assert "redacted" in p.locator(".panel:has-text('Entries whose payload is gone')").inner_text()
    page.shot("run-redacted")
    p.goto(ui.base_url + f"/runs/{world['fork']}")
    assert f"fork of {world['quote_b']}" in p.locator("dl.facts").first.inner_text()
    p.click(f'dd a[href="/runs/{world["quote_b"]}"]')
    p.wait_for_url(f"**/runs/{world['quote_b']}")
    assert world["fork"] in p.locator("dt:has-text('Forks') + dd").inner_text()
    page.shot("run-with-fork")


def test_diff_highlights_the_first_divergence_and_drift_groups_fingerprints(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    p.goto(ui.base_url + f"/runs/{world['quote_a']}")
    p.fill("input[name=b]", world["quote_b"])
    p.click("form:has(input[name=b]) button")
    p.wait_for_url("**/diff?**")
    verdict = p.locator("#diff-verdict")
    assert "Different" in verdict.inner_text()
    assert "output difference in effects at step 1, field result" in verdict.inner_text()
    first = p.locator("tr.first")
    assert first.count() == 1 and "first divergence" in first.inner_text()
    changes = p.locator("table.changes").inner_text()
    assert "/result/price" in changes and "100" in changes and "125" in changes
    highlighted = p.locator("td.first").first
    assert highlighted.evaluate("cell => getComputedStyle(cell).backgroundColor") == "rgb(255, 227, 224)"
    page.shot("diff")

    p.goto(ui.base_url + f"/drift/{world['quote_a']}")
    drift = p.locator("#drift-verdict").inner_text()
    assert "Drift" in drift and "2 different fingerprints" in drift
    page.shot("drift")


def test_verify_now_gives_a_green_verdict_naming_the_pinned_key(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    p.goto(ui.base_url + "/verify")
    assert "pinned key" in p.locator("#signed-by").inner_text()
    assert "example.com/agents" in p.locator("#signed-by").inner_text()
    p.click("#verify-now")
    verdict = p.locator("#store-verdict")
    verdict.wait_for()
    assert "Verified" in verdict.inner_text() and "every hash and chain link checks" in verdict.inner_text()
    assert "signed by pinned key" in verdict.inner_text()
    assert verdict.evaluate("node => node.classList.contains('ok')")
    page.shot("verify")
    p.fill("input[name=run]", world["support"])
    p.click("form:has(input[name=run]) button")
    proof = p.locator("#run-proof")
    assert "Run verified" in proof.inner_text() and "chain: every link checks" in proof.inner_text()
    page.shot("verify-run")


def test_an_approval_clicked_in_the_queue_is_recorded(page: Watched, ui: Bound, world: dict[str, Any]) -> None:
    p = page.page
    p.goto(ui.base_url + "/approvals")
    row = p.locator(f'tr.waiting[data-run="{world["wait_approve"]}"]')
    assert "requires human approval" in row.inner_text()
    page.shot("approvals")
    row.locator("input[name=by]").fill("alice")
    row.locator("input[name=reason]").fill("checked the address")
    row.locator("button[value=approve]").click()
    p.wait_for_selector("#flash")
    assert f"run {world['wait_approve']} step 0: approved by alice" in p.locator("#flash").inner_text()
    assert p.locator(f'tr.waiting[data-run="{world["wait_approve"]}"]').count() == 0
    decided = p.locator(f'tr.decided-run[data-run="{world["wait_approve"]}"]').inner_text()
    assert "approved by alice (checked the address)" in decided and "tracelock resume" in decided
    page.shot("approvals-after")
    p.goto(ui.base_url + f"/runs/{world['wait_approve']}")
    assert "approved by alice (checked the address)" in p.locator("main").inner_text()
    waiting = p.locator(".waiting-step").inner_text()
    assert "step 0 stopped in AUTHORIZE" in waiting and "decided: approved by alice" in waiting
    page.shot("run-awaiting-approval")
