"""(e) Two agent processes share executions; (f) one of them is killed mid-work."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime

from rebuno import Client

from harness import Kernel, Sandbox, run, unique


def create_many(kernel: Kernel, agent_id: str, inputs: list[dict]) -> list[str]:
    async def go():
        async with Client(kernel.url) as client:
            return [(await client.create(agent_id, input=inp)).id for inp in inputs]

    return run(go())


def started_consumers(kernel: Kernel, eid: str) -> list[str]:
    return [e["payload"]["consumer_id"] for e in kernel.events(eid) if e["type"] == "execution.started"]


def test_two_agent_processes_share_executions(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("rr")
    a = sandbox.agent(kernel, agent_id, unique("rr-a"))
    b = sandbox.agent(kernel, agent_id, unique("rr-b"))
    a.wait_connected()
    b.wait_connected()

    ids = create_many(kernel, agent_id, [{"op": "work", "n": n, "sleep": 0.2} for n in range(6)])
    finals = [kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15) for eid in ids]

    assert [f["status"] for f in finals] == ["completed"] * 6, finals
    assert [f["output"]["n"] for f in finals] == list(range(6))
    by = Counter(f["output"]["consumer"] for f in finals)
    assert set(by) == {a.consumer_id, b.consumer_id}, by
    assert all(count >= 1 for count in by.values()), by
    for eid, final in zip(ids, finals):
        # Each execution was assigned once, to the process that completed it.
        assert started_consumers(kernel, eid) == [final["output"]["consumer"]]
    handled = Counter(m["consumer_id"] for m in a.markers("done") + b.markers("done"))
    assert handled == by


def test_killed_agent_work_moves_to_the_survivor(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("ha")
    victim = sandbox.agent(kernel, agent_id, unique("ha-victim"), hang=True)
    victim.wait_connected()

    # Three executions the victim holds and never finishes: two in a plain await, one
    # inside a local tool call (a tool-step blocker counts as running for reassignment).
    ids = create_many(
        kernel,
        agent_id,
        [{"op": "work", "n": 0}, {"op": "work", "n": 1}, {"op": "work", "n": 2, "in_tool": True}],
    )
    for eid in ids:
        victim.wait_marker("start", eid)
    kernel.wait_event(ids[2], "step.created")
    assert [kernel.status(eid) for eid in ids] == ["running", "running", "blocked"]

    survivor = sandbox.agent(kernel, agent_id, unique("ha-survivor"))
    survivor.wait_connected()
    time.sleep(0.3)
    assert [kernel.status(eid) for eid in ids] == ["running", "running", "blocked"]

    killed_at = time.time()
    victim.proc.kill()

    finals = [kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15) for eid in ids]
    assert [f["status"] for f in finals] == ["completed"] * 3, finals
    assert [f["output"] for f in finals] == [
        {"n": n, "consumer": survivor.consumer_id} for n in range(3)
    ]

    for eid in ids:
        events = kernel.events(eid)
        types = [e["type"] for e in events]
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
        assert started_consumers(kernel, eid) == [victim.consumer_id, survivor.consumer_id]
        reset = next(e for e in events if e["type"] == "execution.reset")
        assert reset["payload"]["reason"] == "agent_disconnect"
        # The tool-blocked one may record "blocked" (its status) or "running" (after the
        # tool blocker was cleared first); both mean "was being worked on".
        assert reset["payload"]["from_status"] in (("running", "blocked") if eid == ids[2] else ("running",))
        # Not before the 1 s disconnect grace (--agent-timeout 1s) ran out.
        reset_at = datetime.fromisoformat(reset["timestamp"]).timestamp()
        assert reset_at - killed_at >= 0.8, f"reset {reset_at - killed_at:.2f}s after the kill"
        first_run = types[: types.index("execution.reset") + 1]
        assert "agent.timeout" in first_run
        assert types[-1] == "execution.completed"

    tool_run = kernel.events(ids[2])
    cancelled = [e for e in tool_run if e["type"] == "step.cancelled"]
    assert len(cancelled) == 1 and cancelled[0]["payload"]["reason"] == "agent disconnected"
    types = [e["type"] for e in tool_run]
    assert types.index("step.cancelled") < types.index("execution.reset")
    assert not survivor.markers("cancelled")
