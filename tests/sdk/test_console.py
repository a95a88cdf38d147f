"""The web console end to end: headless Chromium, driven through chromedriver with selenium,
against a real kernel whose executions are run by the real rebuno==0.4.8 SDK agent and runner.

Runs when KEEL_TEST_CHROMEDRIVER names a chromedriver (`.ci/run` installs Debian's chromium and
chromium-driver and sets it; `scripts/test.sh` sets it when /usr/bin/chromedriver exists);
otherwise every test here is skipped and says why. The browser binary is KEEL_TEST_CHROMIUM, or
the first of chromium / chromium-browser / google-chrome on PATH.

Screenshots of every page go to target/console-screenshots/. Each test ends by checking that
the browser logged no error (`SEVERE`) on any page it opened.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rebuno import Client
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from harness import REPO, Kernel, Sandbox, run, unique
from test_llm_gateway import provider  # noqa: F401  (the fixture: a scripted OpenAI-format provider)

CHROMEDRIVER = os.environ.get("KEEL_TEST_CHROMEDRIVER", "")
SHOTS = Path(os.environ.get("KEEL_TEST_SCREENSHOTS", REPO / "target" / "console-screenshots"))

pytestmark = pytest.mark.skipif(
    not CHROMEDRIVER,
    reason="KEEL_TEST_CHROMEDRIVER is not set: the console browser tests are SKIPPED "
    "(set it to a chromedriver, e.g. /usr/bin/chromedriver from Debian's chromium-driver)",
)

POLICY = """\
rules:
  - id: approve-guarded
    priority: 1
    when:
      tool_id: "guarded.*"
    then:
      decision: require_approval
      reason: "a human must agree"
default:
  decision: allow
"""


def chromium_binary() -> str:
    given = os.environ.get("KEEL_TEST_CHROMIUM", "")
    if given:
        return given
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise FileNotFoundError("no chromium on PATH: install it or set KEEL_TEST_CHROMIUM")


@contextlib.contextmanager
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binary()
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver, what: str, condition, timeout: float = 30.0) -> Any:
    """Waits until `condition(driver)` is truthy (retrying across live re-renders)."""

    def probe(d: WebDriver) -> Any:
        try:
            return condition(d)
        except StaleElementReferenceException:
            return False

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(probe, f"waiting for {what}")


def css(driver: WebDriver, selector: str) -> list:
    return driver.find_elements(By.CSS_SELECTOR, selector)


def shot(driver: WebDriver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / f"{name}.png")), name


def no_errors(driver: WebDriver) -> None:
    severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == [], severe


def create(kernel: Kernel, agent_id: str, inp: dict, token: str = "") -> str:
    async def go() -> str:
        async with Client(kernel.url, api_key=token) as client:
            return (await client.create(agent_id, inp, labels={"suite": "console"})).id

    return run(go())


def api(kernel: Kernel, path: str, token: str = "") -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(kernel.url + path, headers=headers, timeout=5)
    response.raise_for_status()
    return response.json()


def status_is(*statuses: str):
    return lambda d: any(
        e.get_attribute("data-status") in statuses for e in css(d, "#execution-status")
    )


def timeline_has(event_type: str):
    return lambda d: css(d, f'#timeline li[data-type="{event_type}"]')


def test_login_live_list_signal_and_cancel(sandbox: Sandbox) -> None:
    token = "console-s3cret"
    kernel = sandbox.kernel("--bearer-token", token)
    agent_id = unique("console")
    agent = sandbox.agent(kernel, agent_id, unique("console-c"), api_key=token)
    agent.wait_connected()
    # Without the token only the shell is served: the views answer 401.
    assert httpx.get(kernel.url + "/").status_code == 200
    assert httpx.get(kernel.url + "/console/view/executions").status_code == 401

    # One kernel for the browser (its sign-in is per origin): in the cluster mode each
    # use of kernel.url names the next kernel.
    base = kernel.url
    with browser() as b:
        b.get(base + "/")
        wait(b, "the sign-in form", lambda d: d.find_element(By.ID, "token").is_displayed())
        assert not b.find_element(By.ID, "app").is_displayed()
        shot(b, "login")
        b.find_element(By.ID, "token").send_keys(token)
        b.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
        wait(b, "the executions page", lambda d: css(d, '[data-page="executions"]'))

        # An execution appears and completes while the list is open (no reload).
        done = create(kernel, agent_id, {"op": "tools", "a": 2, "b": 3, "word": "hi"}, token)
        row = f'tr[data-execution-id="{done}"][data-status="completed"]'
        wait(b, "the new execution to show as completed", lambda d: css(d, row))
        count = css(b, '[data-count="completed"]')[0].text
        assert int(count) >= 1
        shot(b, "executions")

        # The execution page: live timeline, steps grouped, a signal sent from the console.
        held = create(kernel, agent_id, {"op": "hold", "signal": "finish"}, token)
        b.get(base + "/executions/" + held)
        wait(b, "the execution to wait for its signal", status_is("blocked"))
        wait(b, "the blocked event in the timeline", timeline_has("execution.blocked"))
        b.find_element(By.ID, "signal-type").send_keys("finish")
        b.find_element(By.ID, "signal-payload").send_keys('{"by": "console"}')
        b.find_element(By.CSS_SELECTOR, "form[data-signal] button[type=submit]").click()
        wait(b, "the completion to arrive live", timeline_has("execution.completed"))
        wait(b, "the header to show completed", status_is("completed"))
        output = api(kernel, f"/v0/executions/{held}", token)["output"]
        assert output["finished"] == {"by": "console"}, output
        assert "console" in b.find_element(By.ID, "execution-live").text
        shot(b, "execution-signal")

        # A finished execution with tool steps: each step is one collapsed line with its state.
        b.get(base + "/executions/" + done)
        wait(b, "the step lines", lambda d: len(css(d, "#timeline li.step")) == 2)
        steps = css(b, "#timeline li.step")
        assert [s.get_attribute("data-state") for s in steps] == ["succeeded", "succeeded"]
        assert "math.add" in steps[0].text and "attempt 1 of 1" in steps[0].text
        steps[0].find_element(By.TAG_NAME, "summary").click()
        wait(b, "the step's events", lambda d: css(d, "#timeline li.step .step-events li"))
        # One time format on every page: the header's and the timeline's.
        stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,3})? UTC$")
        times = [t.get_attribute("textContent") for t in css(b, "time")]
        assert len(times) > 3 and all(stamp.match(t) for t in times), times
        shot(b, "execution")

        # Cancel from the console: the SDK handler is cancelled.
        doomed = create(kernel, agent_id, {"op": "hold", "signal": "never"}, token)
        b.get(base + "/executions/" + doomed)
        wait(b, "the execution to block", status_is("blocked"))
        b.find_element(By.CSS_SELECTOR, "form[data-cancel] button").click()
        wait(b, "the cancellation to arrive live", timeline_has("execution.cancelled"))
        wait(b, "the header to show cancelled", status_is("cancelled"))
        assert not css(b, "form[data-cancel]"), "a cancelled execution offers no actions"
        agent.wait_marker("cancelled", doomed)
        # The header says why it ended.
        wait(b, "the reason in the header", lambda d: css(d, "#execution-error"))
        assert b.find_element(By.ID, "execution-error").text == "cancelled by request"

        # "Run again": a new execution with the same agent, input and labels, and its page.
        b.find_element(By.CSS_SELECTOR, "form[data-rerun] button").click()
        wait(b, "the new execution's page", lambda d: d.current_url.rstrip("/").split("/")[-1] != doomed
             and css(d, '[data-page="execution"]'))
        again = b.current_url.rstrip("/").split("/")[-1]
        copy = api(kernel, f"/v0/executions/{again}", token)
        assert copy["agent_id"] == agent_id and copy["input"] == {"op": "hold", "signal": "never"}, copy
        assert copy["labels"] == {"suite": "console"}, copy
        wait(b, "the copy to block like the original", status_is("blocked"))
        # The blocked glyph is one every default font has (not U+23F8, an empty box in Chromium).
        assert css(b, "#execution-status .badge span")[0].text == "‖"
        b.find_element(By.CSS_SELECTOR, "form[data-cancel] button").click()
        wait(b, "the copy to be cancelled", status_is("cancelled"))

        # The list: filters come before the table, labels read key=value.
        b.get(base + "/")
        wait(b, "the executions page", lambda d: css(d, "table.executions"))
        assert b.execute_script(
            "return document.querySelector('form.filters')"
            ".compareDocumentPosition(document.querySelector('table.executions'))"
            " & Node.DOCUMENT_POSITION_FOLLOWING"
        )
        row = f'tr[data-execution-id="{doomed}"]'
        assert "suite=console" in css(b, row)[0].text
        assert "cancelled by request" in css(b, row + " [data-error]")[0].text

        # Sign out: the token is forgotten and the sign-in form is back.
        b.find_element(By.ID, "logout").click()
        wait(b, "the sign-in form", lambda d: d.find_element(By.ID, "token").is_displayed())
        assert b.execute_script("return sessionStorage.getItem('keel.token')") is None
        no_errors(b)


def test_approvals_inbox_directory_and_health(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "console.yaml"
    policy.write_text(POLICY)
    kernel = sandbox.kernel("--policy", str(policy))
    runner_id = unique("calc-runner")
    runner = sandbox.runner(kernel, runner_id, unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("console-approval")
    agent = sandbox.agent(kernel, agent_id, unique("console-approval-c"))
    agent.wait_connected()
    eid = create(kernel, agent_id, {"op": "approval"})

    with browser() as b:
        b.get(kernel.url + "/approvals")
        first_row = wait(
            b, "the first approval in the inbox",
            lambda d: [r for r in css(d, "tr[data-step-id]") if eid in r.text],
        )[0]
        first_step = first_row.get_attribute("data-step-id")
        assert "guarded.echo" in first_row.text and "a human must agree" in first_row.text
        pending = api(kernel, "/v0/approvals")["approvals"]
        assert [(a["execution_id"], a["step_id"]) for a in pending] == [(eid, first_step)]
        shot(b, "approvals")
        first_row.find_element(By.CSS_SELECTOR, "button.approve").click()

        # The agent goes on (a remote call through the runner), then asks again: deny that one.
        def second(d: WebDriver):
            rows = [r for r in css(d, "tr[data-step-id]") if r.get_attribute("data-step-id") != first_step]
            return rows[0] if rows else None

        row = wait(b, "the second approval", second, timeout=30)
        row.find_element(By.CSS_SELECTOR, "input[name=reason]").send_keys("not today")
        row.find_element(By.CSS_SELECTOR, "button.deny").click()
        final = kernel_status(kernel, eid, "completed", "failed")
        assert final["status"] == "completed", final
        assert final["output"]["local"] == "approved-local"
        assert final["output"]["remote"] == 25
        assert "denied" in final["output"]["denied"]
        failures = [e["payload"]["error"] for e in kernel.events(eid) if e["type"] == "step.failed"]
        assert failures == ["not today"], failures
        wait(b, "the inbox to empty", lambda d: "Nothing is waiting" in d.find_element(By.ID, "app").text)
        assert api(kernel, "/v0/approvals")["approvals"] == []

        b.get(kernel.url + "/directory")
        wait(b, "the runner and its tools", lambda d: css(d, f'tr[data-runner-id="{runner_id}"]'))
        assert css(b, f'tr[data-agent-id="{agent_id}"]')
        assert css(b, 'tr[data-tool-id="calc_mul"]')
        shot(b, "directory")

        b.get(kernel.url + "/status")
        digest = api(kernel, "/v0/policy")["digest"]
        wait(b, "the policy digest", lambda d: css(d, f'[data-digest="{digest}"]'))
        text = b.find_element(By.ID, "app").text
        assert "approve-guarded" in text and "ready" in text
        shot(b, "health")
        # A broken policy file: the reload fails, the health page says so, the policy stays.
        policy.write_text(POLICY + "bogus_key: 1\n")
        wait(b, "the failed reload on the health page",
             lambda d: "bogus_key" in d.find_element(By.ID, "status-live").text)
        assert api(kernel, "/v0/policy")["digest"] == digest
        assert api(kernel, "/v0/policy")["last_reload"]["result"] == "error"
        shot(b, "health-reload-error")

        # The execution page shows the denied step as failed, in words and not only colour.
        b.get(kernel.url + "/executions/" + eid)
        wait(b, "the steps", lambda d: len(css(d, "#timeline li.step")) == 3)
        states = [s.get_attribute("data-state") for s in css(b, "#timeline li.step")]
        assert states == ["succeeded", "succeeded", "failed"], states
        assert "failed" in css(b, "#timeline li.step")[2].text
        no_errors(b)


def kernel_status(kernel: Kernel, eid: str, *statuses: str) -> dict:
    return kernel.wait_status(eid, *statuses, timeout=30)



def test_bidi_controls_are_shown_and_agent_links_are_encoded(sandbox: Sandbox) -> None:
    """Issue 38: `invoice\\u202Efdp.exe` must not pass for `invoiceexe.pdf`, and an agent id
    holding `&`, `=`, `#` or a space survives the directory's link to its pending executions."""
    kernel = sandbox.kernel()
    rlo = "\u202e"
    agent_id = unique("inv&status=failed#x y") + rlo + "fdp.exe"
    created = httpx.post(
        kernel.url + "/v0/executions",
        json={"agent_id": agent_id, "input": {"file": "invoice" + rlo + "fdp.exe"},
              "labels": {"file": "a" + rlo + "b"}},
        timeout=5,
    )
    assert created.status_code == 201, created.text
    eid = created.json()["id"]
    other = httpx.post(kernel.url + "/v0/executions", json={"agent_id": unique("plain")}, timeout=5)
    assert other.status_code == 201, other.text

    # One kernel for the browser: in the cluster mode each use of kernel.url names the next.
    base = kernel.url
    with browser() as b:
        b.get(base + "/directory")
        wait(
            b, "the unserved agent's link",
            lambda d: [a for a in css(d, "tr[data-unserved-agent] a") if a.get_attribute("href")],
        )
        rows = css(b, "tr[data-unserved-agent]")
        ours = [r for r in rows if "U+202E" in r.text]
        assert ours, [r.text for r in rows]
        assert rlo not in b.find_element(By.ID, "app").text
        href = ours[0].find_element(By.CSS_SELECTOR, "a").get_attribute("href")
        assert "agent_id=inv%26status%3Dfailed%23x+y" in href, href
        assert "%E2%80%AE" in href, href
        shot(b, "bidi-directory")

        b.get(href)
        wait(b, "the filtered list", lambda d: css(d, f'a[href="/executions/{eid}"]'))
        listed = [a.get_attribute("href") for a in css(b, 'a[href^="/executions/"]')]
        assert listed == [base + f"/executions/{eid}"], listed
        assert b.find_element(By.NAME, "agent_id").get_attribute("value") == agent_id
        app_text = b.find_element(By.ID, "app").text
        assert rlo not in app_text and "U+202E" in app_text, app_text

        b.get(kernel.url + "/executions/" + eid)
        wait(b, "the timeline", timeline_has("execution.created"))
        for entry in css(b, "#timeline li"):
            entry.click()
        app_text = b.find_element(By.ID, "app").text
        assert rlo not in app_text, app_text
        assert "⟨U+202E⟩fdp.exe" in app_text, app_text
        shot(b, "bidi-execution")
        no_errors(b)


def test_model_calls_are_on_the_timeline_with_the_executions_totals(
    sandbox: Sandbox, provider: str, tmp_path
) -> None:
    """Issue 36: each model call through the LLM gateway is a line of the timeline (model,
    outcome, tokens, cost) and the summary adds the execution's totals."""
    config = tmp_path / "llm.yaml"
    config.write_text(
        f"providers:\n  openai:\n    format: openai\n    base_url: {provider}\n"
        "    prices:\n      gpt-test: {input: 1.0, output: 2.0}\n"
    )
    kernel = sandbox.kernel("--llm-config", str(config))
    agent_id = unique("console-llm")
    sandbox.agent(kernel, agent_id, unique("console-llm-c"))

    async def scenario() -> str:
        async with Client(kernel.url) as client:
            final = await client.run_until_complete(agent_id, input={"op": "llm", "model": "gpt-test"})
            return final.id

    eid = run(scenario(), timeout=20)
    with browser() as b:
        b.get(kernel.url + "/executions/" + eid)
        wait(b, "both model calls", lambda d: len(css(d, '#timeline li[data-type="llm.called"]')) == 2)
        rows = [row.text for row in css(b, '#timeline li[data-type="llm.called"]')]
        # 5 in + 1 out at $1/$2 per million, then a stream of 4 in + 2 out.
        assert "model call openai/gpt-test: ok, 5 in + 1 out tokens, $0.000007" in rows[0], rows
        assert "model call openai/gpt-test (stream): ok, 4 in + 2 out tokens, $0.000008" in rows[1], rows
        summary = b.find_element(By.ID, "timeline-summary").text
        assert "Model calls: 2, 9 in + 3 out tokens, $0.000015." in summary, summary
        shot(b, "model-calls")
        no_errors(b)
