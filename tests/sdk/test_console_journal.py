"""The console's execution page shows what the step journal did (issue 33, docs/console.md):
steps a re-run replayed ("replayed from step X"), calls that ran again although a result was
recorded, and at_most_once steps whose outcome is unknown, which an operator reconciles from
the page with each of the three answers. Headless Chromium as in test_console.py."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from harness import Kernel, Sandbox, unique, wait_until
from test_console import browser, create, css, no_errors, pytestmark, shot, status_is, wait  # noqa: F401
from test_replay import awaiting_answer


def policy_text(fresh_agent: str) -> str:
    return f"""\
rules:
  - id: charge-once
    priority: 1
    when:
      tool_id: calc_slow
    then:
      decision: allow
      idempotency: at_most_once
  - id: always-fresh
    priority: 2
    when:
      tool_id: calc_mul
      agent_id: {fresh_agent}
    then:
      decision: allow
      replay: false
default:
  decision: allow
"""


def rerun_journey(sandbox: Sandbox, kernel: Kernel, agent_id: str) -> str:
    """A journey whose first agent hangs at the pause and is killed: the re-run finishes it."""
    victim = sandbox.agent(kernel, agent_id, unique("victim"), hang=True)
    victim.wait_connected()
    eid = create(kernel, agent_id, {"op": "journey", "a": 2, "b": 3})
    victim.wait_marker("paused", eid)
    survivor = sandbox.agent(kernel, agent_id, unique("survivor"))
    survivor.wait_connected()
    victim.proc.kill()
    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=20)
    assert final["status"] == "completed", final
    return eid


def step_lines(driver, tool: str) -> list:
    return [s for s in css(driver, "#timeline li.step") if tool in s.find_element(By.TAG_NAME, "summary").text]


def test_journal_badges_and_reconciling_from_the_console(sandbox: Sandbox) -> None:
    fresh_agent = unique("fresh")
    policy = sandbox.workdir / "journal.yaml"
    policy.write_text(policy_text(fresh_agent))
    kernel = sandbox.kernel("--policy", str(policy), "--runner-timeout", "1s")

    # Three at_most_once calls whose runners are lost after `started`.
    hung = [sandbox.runner(kernel, unique("hung"), unique("hung-c"), hang=True) for _ in range(3)]
    for runner in hung:
        runner.wait_connected("runners")
    once_agent = unique("once")
    sandbox.agent(kernel, once_agent, unique("once-c"))
    ids = [
        create(kernel, once_agent, {"op": "call", "tool": "calc_slow", "args": {"seconds": 1}})
        for _ in range(3)
    ]
    for eid in ids:
        kernel.wait_event(eid, "step.started")
    for runner in hung:
        runner.proc.kill()
    steps = {eid: wait_until("an unknown outcome", lambda e=eid: awaiting_answer(kernel, e), 15) for eid in ids}

    runner_id = unique("calc")
    sandbox.runner(kernel, runner_id, unique("calc-c")).wait_connected("runners")
    replayed = rerun_journey(sandbox, kernel, unique("replayed"))
    repeated = rerun_journey(sandbox, kernel, fresh_agent)

    with browser() as b:
        b.get(f"{kernel.url}/executions/{replayed}")
        badges = wait(b, "three replay badges", lambda d: len(css(d, ".badge-replayed")) == 3 and css(d, ".badge-replayed"))
        events = kernel.events(replayed)
        originals = [e["step_id"] for e in events if e["type"] == "step.completed"][:3]
        assert [badge.text for badge in badges] == [f"↺ replayed from step {s}" for s in originals]
        assert css(b, ".badge-repeated") == [] and css(b, ".badge-unknown") == []
        shot(b, "journal-replayed")

        b.get(f"{kernel.url}/executions/{repeated}")
        repeats = wait(b, "repeat badges", lambda d: len(css(d, ".badge-repeated")) == 3 and css(d, ".badge-repeated"))
        assert all(badge.text == "⚠ re-executed although a result was recorded" for badge in repeats)
        assert css(b, ".badge-replayed") == []
        shot(b, "journal-repeated")

        happened, again, failed = ids
        answers = [
            (happened, "happened", '{"slept": 1, "runner": "by hand"}', "completed"),
            (again, "run_again", "", "completed"),
            (failed, "fail", "card declined", "failed"),
        ]
        for eid, answer, text, status in answers:
            b.get(f"{kernel.url}/executions/{eid}")
            form = wait(b, "the reconcile form", lambda d: css(d, f'form.reconcile[data-step-id="{steps[eid]}"]'))[0]
            assert "? outcome unknown" in step_lines(b, "calc_slow")[0].text
            shot(b, f"journal-unknown-{answer}")
            if answer == "happened":
                form.find_element(By.NAME, "result").send_keys(text)
            if answer == "fail":
                form.find_element(By.NAME, "error").send_keys(text)
            form.find_element(By.CSS_SELECTOR, f'button[value="{answer}"]').click()
            wait(b, f"{eid} to be {status}", status_is(status))
            # The badge and the form go once the answer is in the log.
            wait(b, "the form to go", lambda d: css(d, "form.reconcile") == [] and css(d, ".badge-unknown") == [])
            no_errors(b)

    finals = {eid: kernel.wait_status(eid, "completed", "failed", timeout=10) for eid in ids}
    assert finals[happened]["output"]["result"] == {"slept": 1, "runner": "by hand"}
    assert finals[again]["output"]["result"] == {"slept": 1, "runner": runner_id}
    assert [e["payload"]["error"] for e in kernel.events(failed) if e["type"] == "step.failed"] == ["card declined"]
    for eid, answer, _, _ in answers:
        assert [e["payload"]["answer"] for e in kernel.events(eid) if e["type"] == "step.reconciled"] == [answer]
