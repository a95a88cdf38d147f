"""Issue 33: a re-run execution gets the recorded outcome of every remote call that already
completed instead of running it again (docs/failure-semantics.md, "What a re-run repeats and
what it does not"). Driven by the unmodified rebuno 0.4.8 SDK."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from rebuno import Client

from harness import Kernel, Sandbox, keel_bin, run, unique, wait_until


def create(kernel: Kernel, agent_id: str, inp: dict) -> str:
    async def go():
        async with Client(kernel.url) as client:
            return (await client.create(agent_id, input=inp)).id

    return run(go())


def jobs(runner) -> int:
    return len([m for m in runner.markers("job") if m["tool_id"] == "calc_mul"])


def test_a_rerun_on_another_consumer_replays_completed_remote_calls(
    sandbox: Sandbox, kernel: Kernel
) -> None:
    runner = sandbox.runner(kernel, unique("calc-runner"), unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("journey")
    victim = sandbox.agent(kernel, agent_id, unique("journey-victim"), hang=True)
    victim.wait_connected()

    eid = create(kernel, agent_id, {"op": "journey", "a": 2, "b": 3})
    victim.wait_marker("paused", eid)
    assert jobs(runner) == 3
    survivor = sandbox.agent(kernel, agent_id, unique("journey-survivor"))
    survivor.wait_connected()
    victim.proc.kill()

    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15)
    assert final["status"] == "completed", final
    # Only the call made after the pause ran again: 3 + 1 runner executions.
    assert jobs(runner) == 4, runner.markers()
    events = kernel.events(eid)
    types = [e["type"] for e in events]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert "execution.reset" in types
    rerun = events[types.index("execution.reset") :]
    originals = [
        e["step_id"] for e in events[: types.index("execution.reset")] if e["type"] == "step.completed"
    ]
    replays = [
        e for e in rerun if e["type"] == "step.created" and e["payload"].get("replay_of")
    ]
    # Each replay names the step it replays, in the order the calls were made (the second
    # identical call replays the second recorded one).
    assert [e["payload"]["replay_of"] for e in replays] == originals
    replayed_steps = {e["step_id"] for e in replays}
    assert not [
        e for e in rerun if e["type"] in ("step.dispatched", "step.started") and e["step_id"] in replayed_steps
    ]
    assert len([e for e in rerun if e["type"] == "step.dispatched"]) == 1

    # The same work uninterrupted gives the same output.
    before = jobs(runner)
    plain = create(kernel, agent_id, {"op": "journey", "a": 2, "b": 3})
    reference = kernel.wait_status(plain, "completed", "failed", "cancelled", timeout=15)
    assert reference["status"] == "completed", reference
    assert jobs(runner) == before + 4
    assert final["output"] == reference["output"] == {
        "products": [6, 6, 42, 42],
        "consumer": survivor.consumer_id,
    }
    assert "execution.reset" not in kernel.event_types(plain)


def test_a_kernel_kill_and_a_lost_agent_replay_from_the_log(sandbox: Sandbox) -> None:
    """kill -9 the kernel with the agent killed too: the rebuilt execution re-runs on another
    consumer and the journal, rebuilt from the log, still answers the completed calls."""
    kernel = sandbox.kernel("--runner-timeout", "2s", agent_timeout="1s")
    runner = sandbox.runner(kernel, unique("calc-runner"), unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("journey-k9")
    victim = sandbox.agent(kernel, agent_id, unique("journey-victim"), hang=True)
    victim.wait_connected()
    eid = create(kernel, agent_id, {"op": "journey", "a": 3, "b": 4})
    victim.wait_marker("paused", eid)
    victim.proc.kill()
    kernel.restart()
    survivor = sandbox.agent(kernel, agent_id, unique("journey-survivor"))
    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=20)
    assert final["status"] == "completed", final
    assert final["output"] == {"products": [12, 12, 84, 84], "consumer": survivor.consumer_id}
    assert jobs(runner) == 4, runner.markers()
    replays = [
        e for e in kernel.events(eid) if e["type"] == "step.created" and e["payload"].get("replay_of")
    ]
    assert len(replays) == 3


APPROVALS = """\
rules:
  - id: approve-guarded
    priority: 1
    when:
      tool_id: "guarded.*"
    then:
      decision: require_approval
      reason: "a human must agree"
  - id: approve-mul
    priority: 2
    when:
      tool_id: calc_mul
    then:
      decision: require_approval
      reason: "multiplication is serious"
default:
  decision: allow
"""


def send(kernel: Kernel, eid: str, signal_type: str, payload: dict) -> None:
    async def go():
        async with Client(kernel.url) as client:
            return await client.send_signal(eid, signal_type, payload)

    assert run(go()).status == "ok"


def approve_next(kernel: Kernel, eid: str, nth: int) -> None:
    def block():
        blocks = [
            e for e in kernel.events(eid)
            if e["type"] == "execution.blocked" and e["payload"]["reason"] == "approval"
        ]
        return blocks[nth - 1] if len(blocks) >= nth else None

    found = wait_until(f"approval request #{nth}", block, timeout=10)
    send(kernel, eid, "step.approve", {"step_id": found["payload"]["ref"], "approved": True})


@pytest.mark.parametrize("crash", ["agent", "kernel"])
def test_a_rerun_gets_its_signal_and_approvals_again(sandbox: Sandbox, crash: str) -> None:
    """The issue's first scenario: a remote tool, a wait and two approvals, the agent killed
    mid-run; with `kernel`, the kernel is killed (-9) and restarted as well, so the journal
    comes from the log alone."""
    policy = sandbox.workdir / "approvals.yaml"
    policy.write_text(APPROVALS)
    kernel = sandbox.kernel("--policy", str(policy), "--runner-timeout", "2s")
    runner = sandbox.runner(kernel, unique("calc-runner"), unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("gated")
    victim = sandbox.agent(kernel, agent_id, unique("gated-victim"), hang=True)
    victim.wait_connected()

    eid = create(kernel, agent_id, {"op": "gated"})
    kernel.wait_status(eid, "blocked")
    send(kernel, eid, "go", {"a": 21})
    approve_next(kernel, eid, 1)  # the remote calc_mul
    approve_next(kernel, eid, 2)  # the local guarded.echo
    victim.wait_marker("paused", eid)
    if crash == "kernel":
        victim.proc.kill()
        kernel.restart()
        survivor = sandbox.agent(kernel, agent_id, unique("gated-survivor"))
    else:
        survivor = sandbox.agent(kernel, agent_id, unique("gated-survivor"))
        survivor.wait_connected()
        victim.proc.kill()

    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=20)
    assert final["status"] == "completed", final
    assert final["output"] == {
        "go": {"a": 21}, "product": 42, "echoed": 42, "last": 43, "consumer": survivor.consumer_id,
    }
    events = kernel.events(eid)
    types = [e["type"] for e in events]
    assert "execution.reset" in types
    # Neither the signal nor an approval was asked for again; the remote call ran once.
    assert types.count("signal.received") == 3  # go + two step.approve
    assert types.count("step.approval_required") == 2
    assert jobs(runner) == 1
    rerun = events[types.index("execution.reset") :]
    waits = [e for e in rerun if e["type"] == "intent.accepted" and e["payload"]["intent_type"] == "wait"]
    assert [w["payload"]["details"] for w in waits] == [{"signal_type": "go", "replay": True}]
    gated = next(
        e["step_id"] for e in events
        if e["type"] == "step.created" and e["payload"]["tool_id"] == "guarded.echo"
    )
    reused = [
        e for e in rerun
        if e["type"] == "intent.accepted" and e["payload"].get("details", {}).get("approval_of")
    ]
    assert [e["payload"]["details"]["approval_of"] for e in reused] == [gated]
    # The rebuno SDK runs a local tool itself: it ran again (docs/failure-semantics.md), and
    # the log says which recorded step it repeats.
    assert len(victim.markers("guarded-ran")) == 1 and len(survivor.markers("guarded-ran")) == 1
    again = [
        e for e in rerun if e["type"] == "step.created" and e["payload"]["tool_id"] == "guarded.echo"
    ]
    assert [e["payload"].get("repeats") for e in again] == [gated]


def test_a_rule_with_replay_false_runs_its_calls_again(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "no-replay.yaml"
    policy.write_text(
        "rules:\n"
        "  - id: always-fresh\n"
        "    priority: 1\n"
        "    when:\n"
        "      tool_id: calc_mul\n"
        "    then:\n"
        "      decision: allow\n"
        "      replay: false\n"
        "default:\n"
        "  decision: allow\n"
    )
    kernel = sandbox.kernel("--policy", str(policy))
    runner = sandbox.runner(kernel, unique("calc-runner"), unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("fresh")
    victim = sandbox.agent(kernel, agent_id, unique("fresh-victim"), hang=True)
    victim.wait_connected()
    eid = create(kernel, agent_id, {"op": "journey", "a": 2, "b": 3})
    victim.wait_marker("paused", eid)
    survivor = sandbox.agent(kernel, agent_id, unique("fresh-survivor"))
    survivor.wait_connected()
    victim.proc.kill()
    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15)
    assert final["status"] == "completed", final
    assert final["output"]["products"] == [6, 6, 42, 42]
    # Nothing replayed: 3 calls, then all 4 again.
    assert jobs(runner) == 7, runner.markers()
    assert not [
        e for e in kernel.events(eid) if e["type"] == "step.created" and e["payload"].get("replay_of")
    ]


AT_MOST_ONCE = """\
rules:
  - id: charge-once
    priority: 1
    when:
      tool_id: calc_slow
    then:
      decision: allow
      idempotency: at_most_once
default:
  decision: allow
"""


def reconcile(kernel: Kernel, eid: str, step_id: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{kernel.url}/v0/executions/{eid}/steps/{step_id}/reconcile", json=body, timeout=5
    )


def awaiting_answer(kernel: Kernel, eid: str) -> str | None:
    """The step of `eid` whose outcome is unknown and that no later event ended, if any."""
    events = kernel.events(eid)
    unknown = [e["step_id"] for e in events if e["type"] == "step.outcome_unknown"]
    ended = {
        e["step_id"] for e in events
        if e["type"] in ("step.cancelled", "step.completed", "step.failed", "step.reconciled")
    }
    open_steps = [step for step in unknown if step not in ended]
    return open_steps[-1] if open_steps else None


@pytest.mark.parametrize("lost", ["runner", "kernel"])
def test_an_at_most_once_step_that_lost_its_runner_waits_for_an_operator(
    sandbox: Sandbox, lost: str
) -> None:
    """The runners are killed after `started`; with `kernel`, the kernel is killed (-9) and
    restarted too. Either way no job runs again until an operator answers."""
    policy = sandbox.workdir / "at-most-once.yaml"
    policy.write_text(AT_MOST_ONCE)
    kernel = sandbox.kernel("--policy", str(policy), "--runner-timeout", "1s")
    # A runner takes one job at a time: one hung runner per execution.
    hung = [sandbox.runner(kernel, unique("hung-runner"), unique("hung-runner-c"), hang=True) for _ in range(3)]
    for runner in hung:
        runner.wait_connected("runners")
    agent_id = unique("once")
    sandbox.agent(kernel, agent_id, unique("once-c"))
    ids = [create(kernel, agent_id, {"op": "call", "tool": "calc_slow", "args": {"seconds": 1}}) for _ in range(3)]
    for eid in ids:
        kernel.wait_event(eid, "step.started")
    for runner in hung:
        runner.proc.kill()
    if lost == "kernel":
        kernel.restart()
    steps = {}
    for eid in ids:
        steps[eid] = wait_until(f"a step of {eid} awaiting an answer", lambda: awaiting_answer(kernel, eid), timeout=15)
        assert kernel.status(eid) == "blocked"
        assert "step.retried" not in kernel.event_types(eid)

    fresh_id = unique("fresh-runner")
    fresh = sandbox.runner(kernel, fresh_id, unique("fresh-runner-c"))
    fresh.wait_connected("runners")
    happened, again, failed = ids
    assert reconcile(kernel, happened, steps[happened], {"answer": "maybe"}).status_code == 400
    assert reconcile(kernel, happened, "no-such-step", {"answer": "run_again"}).status_code == 404
    ok = reconcile(kernel, happened, steps[happened], {"answer": "happened", "result": {"slept": 1, "runner": "by hand"}})
    assert ok.status_code == 200, ok.text
    assert reconcile(kernel, again, steps[again], {"answer": "run_again"}).status_code == 200
    # The CLI gives the same answer.
    cli = subprocess.run(
        [str(keel_bin()), "executions", "reconcile", failed, "--step", steps[failed],
         "--answer", "fail", "--error", "card declined", "--url", kernel.url],
        capture_output=True, text=True, timeout=20,
    )
    assert cli.returncode == 0, cli.stderr
    assert f"step {steps[failed]} of {failed} reconciled: fail" in cli.stdout
    # Answered once: the step's outcome is known now.
    late = reconcile(kernel, happened, steps[happened], {"answer": "run_again"})
    assert late.status_code == 409 and late.json()["code"] == "CONFLICT", late.text

    finals = {eid: kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15) for eid in ids}
    assert finals[happened]["status"] == "completed", finals[happened]
    assert finals[happened]["output"]["result"] == {"slept": 1, "runner": "by hand"}
    assert finals[again]["status"] == "completed", finals[again]
    assert finals[again]["output"]["result"] == {"slept": 1, "runner": fresh_id}
    assert finals[failed]["status"] == "failed", finals[failed]
    failed_events = kernel.events(failed)
    assert [e["payload"]["error"] for e in failed_events if e["type"] == "step.failed"] == ["card declined"]
    # Nothing ran again without an answer: the hung runner got the three first attempts, the
    # fresh one only the step an operator said to run again.
    assert sum(len(runner.markers("job")) for runner in hung) == 3
    assert len(fresh.markers("job")) == 1
    for eid in ids:
        reconciled = [e["payload"]["answer"] for e in kernel.events(eid) if e["type"] == "step.reconciled"]
        assert reconciled == [{happened: "happened", again: "run_again", failed: "fail"}[eid]]
