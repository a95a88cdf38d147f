"""Issue 33: a re-run execution gets the recorded outcome of every remote call that already
completed instead of running it again (docs/failure-semantics.md, "What a re-run repeats and
what it does not"). Driven by the unmodified rebuno 0.4.8 SDK."""

from __future__ import annotations

from rebuno import Client

from harness import Kernel, Sandbox, run, unique


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
