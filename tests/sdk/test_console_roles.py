"""The console by role (docs/console.md, "Roles"): each timeline entry names the principal that
caused it, and the pages offer only what the signed-in key's role may do — a reader nothing, an
approver approve/deny (of the approvals the kernel would take its answer to), an operator cancel,
signal and run again; an agent key cannot use the console. Headless Chromium like test_console.py (skipped without KEEL_TEST_CHROMEDRIVER)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from harness import Sandbox, unique, wait_until
from test_console import (
    CHROMEDRIVER,
    POLICY,
    api,
    browser,
    create,
    css,
    no_errors,
    shot,
    status_is,
    timeline_has,
    wait,
)
from test_identity import ROOT, new_key

pytestmark = pytest.mark.skipif(
    not CHROMEDRIVER, reason="KEEL_TEST_CHROMEDRIVER is not set: the console browser tests are SKIPPED"
)

# Every control that acts on an execution.
ACTIONS = ("form[data-rerun]", "form[data-cancel]", "form[data-signal]", "form[data-decision]")


def sign_in(b: WebDriver, base: str, key: str) -> None:
    """Signs out if signed in, then signs in with `key` on the executions page."""
    b.get(base + "/")
    if b.execute_script("return sessionStorage.getItem('keel.token')"):
        wait(b, "the sign-out button", lambda d: d.find_element(By.ID, "logout").is_displayed())
        b.find_element(By.ID, "logout").click()
    wait(b, "the sign-in form", lambda d: d.find_element(By.ID, "token").is_displayed())
    b.find_element(By.ID, "token").send_keys(key)
    b.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()


def signed_in_as(b: WebDriver, text: str) -> None:
    wait(b, f"the header to say {text}", lambda d: d.find_element(By.ID, "whoami").text == text)


def offered(b: WebDriver) -> list[str]:
    return [selector for selector in ACTIONS if css(b, selector)]


def test_the_console_offers_what_the_keys_role_allows(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "console.yaml"
    policy.write_text(POLICY)
    kernel = sandbox.kernel("--policy", str(policy), "--bearer-token", ROOT)
    agent_id = unique("console-roles")
    reader = new_key(kernel.url, {"name": "watcher", "role": "reader"})
    approver = new_key(kernel.url, {"name": "alice", "role": "approver"})
    operator = new_key(kernel.url, {"name": "ops", "role": "operator"})
    bot = new_key(kernel.url, {"name": "bot", "role": "agent", "scopes": {"agents": [agent_id]}})
    agent = sandbox.agent(kernel, agent_id, unique("console-roles-c"), api_key=bot)
    agent.wait_connected()
    gated = create(kernel, agent_id, {"op": "approval"}, operator)
    held = create(kernel, agent_id, {"op": "hold", "signal": "never"}, operator)
    pending = wait_until(
        "the approval", lambda: api(kernel, "/v0/approvals", ROOT)["approvals"] or None, timeout=15
    )
    assert [a["execution_id"] for a in pending] == [gated], pending

    # One kernel for the browser (its sign-in is per origin).
    base = kernel.url
    with browser() as b:
        # A reader: every page reads, nothing acts; the timeline says who did what.
        sign_in(b, base, reader)
        signed_in_as(b, "Signed in as watcher (reader)")
        b.get(base + "/executions/" + gated)
        wait(b, "the blocked execution", status_is("blocked"))
        wait(b, "the approval's step", lambda d: css(d, '#timeline li.step[data-state="waiting for approval"]'))
        created = css(b, '#timeline li[data-type="execution.created"]')[0]
        assert created.get_attribute("data-principal") == "ops"
        assert "by ops" in created.text, created.text
        step = css(b, "#timeline li.step")[0]
        assert step.get_attribute("data-principals") == "bot", step.get_attribute("data-principals")
        assert "by bot" in step.text, step.text
        started = css(b, '#timeline li[data-type="execution.started"]')[0]
        assert started.get_attribute("data-principal") == "system"
        # It sees the pending approval and who may answer it, and no way to answer.
        box = wait(b, "the pending approval", lambda d: css(d, "#approval .pending-approval"))[0]
        assert "Who may answer: any approver" in box.text, box.text
        assert offered(b) == [], offered(b)
        shot(b, "roles-reader-execution")
        b.get(base + "/approvals")
        row = wait(b, "the inbox row", lambda d: css(d, "tr[data-step-id]"))[0]
        assert gated in row.text and "any approver" in row.text, row.text
        assert offered(b) == [] and not css(b, "button.approve"), offered(b)
        assert "does not answer approvals" in b.find_element(By.ID, "app").text
        no_errors(b)

        # An approver: approve/deny only (where an approval waits), and the approval goes through.
        sign_in(b, base, approver)
        signed_in_as(b, "Signed in as alice (approver)")
        b.get(base + "/executions/" + held)
        wait(b, "the held execution", status_is("blocked"))
        wait(b, "the timeline", timeline_has("execution.blocked"))
        assert offered(b) == [], offered(b)
        b.get(base + "/executions/" + gated)
        wait(b, "the approval's controls", lambda d: css(d, "#approval form[data-decision]"))
        assert offered(b) == ["form[data-decision]"], offered(b)
        b.get(base + "/approvals")
        row = wait(b, "the inbox row", lambda d: css(d, "tr[data-step-id] button.approve"))
        shot(b, "roles-approver-inbox")
        row[0].click()
        resolved = wait_until(
            "the approval to be answered",
            lambda: [e for e in api(kernel, f"/v0/executions/{gated}/events?limit=1000", ROOT)["events"]
                     if e["type"] == "approval.resolved"] or None,
            timeout=15,
        )
        assert [(e["payload"]["decision"], e["payload"]["approver"], e["principal"]) for e in resolved] == [
            ("approved", "alice", "alice")
        ], resolved
        # The approved tool ran: its step completed (the agent's key reported it).
        wait_until(
            "the approved step to complete",
            lambda: [e for e in api(kernel, f"/v0/executions/{gated}/events?limit=1000", ROOT)["events"]
                     if e["type"] == "step.completed" and e["principal"] == "bot"] or None,
            timeout=15,
        )
        no_errors(b)

        # An operator: cancel, signal and run again; cancelling works.
        sign_in(b, base, operator)
        signed_in_as(b, "Signed in as ops (operator)")
        b.get(base + "/executions/" + held)
        wait(b, "the held execution", status_is("blocked"))
        wait(b, "the timeline", timeline_has("execution.blocked"))
        assert offered(b) == list(ACTIONS[:3]), offered(b)
        b.find_element(By.CSS_SELECTOR, "form[data-cancel] button").click()
        wait(b, "the cancellation", timeline_has("execution.cancelled"))
        wait(b, "the header to show cancelled", status_is("cancelled"))
        cancelled = css(b, '#timeline li[data-type="execution.cancelled"]')[0]
        assert cancelled.get_attribute("data-principal") == "ops"
        agent.wait_marker("cancelled", held)
        no_errors(b)

        # An agent key reads nothing: the console says so and asks for another key.
        sign_in(b, base, bot)
        wait(b, "the refusal", lambda d: "cannot use the console" in d.find_element(By.ID, "login-error").text)
        assert not b.find_element(By.ID, "app").is_displayed()
        assert b.execute_script("return sessionStorage.getItem('keel.token')") is None
        shot(b, "roles-agent-refused")
        severe = [e["message"] for e in b.get_log("browser") if e["level"] == "SEVERE"]
        assert all("403" in message for message in severe), severe
