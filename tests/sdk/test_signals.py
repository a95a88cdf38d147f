"""(c) execution.wait_signal + Client.send_signal, including signals sent before the wait."""

from __future__ import annotations

import pytest
from rebuno import Client, ConflictError, NotFoundError
from rebuno.types import ExecutionStatus

from harness import Kernel, Sandbox, run, unique


def send(kernel: Kernel, execution_id: str, signal_type: str, payload) -> str:
    async def go():
        async with Client(kernel.url) as client:
            return (await client.send_signal(execution_id, signal_type, payload)).status

    return run(go())


def create(kernel: Kernel, agent_id: str, inp) -> str:
    async def go():
        async with Client(kernel.url) as client:
            return (await client.create(agent_id, input=inp)).id

    return run(go())


def test_wait_signal_and_a_signal_sent_before_its_wait(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("signal")
    agent = sandbox.agent(kernel, agent_id, unique("signal-c"))
    eid = create(kernel, agent_id, {"op": "signal", "signals": ["first", "second"]})

    kernel.wait_status(eid, "blocked")
    blocked = kernel.wait_event(eid, "execution.blocked")[0]
    assert blocked["payload"]["reason"] == "signal"
    assert blocked["payload"]["ref"] == "first"

    # "second" arrives while the handler still waits for "first": stored, not consumed.
    assert send(kernel, eid, "second", {"n": 2}) == "ok"
    assert kernel.status(eid) == "blocked"
    assert send(kernel, eid, "first", {"n": 1}) == "ok"

    final = kernel.wait_status(eid, "completed", "failed", "cancelled")
    assert final["status"] == "completed", final
    assert final["output"] == {"payloads": [{"n": 1}, {"n": 2}], "consumer": agent.consumer_id}

    events = kernel.events(eid)
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    tail = [(e["type"], e["payload"].get("reason") or e["payload"].get("signal_type")) for e in events]
    i = tail.index(("execution.blocked", "signal"))
    assert tail[i:] == [
        ("execution.blocked", "signal"),
        ("signal.received", "second"),
        ("signal.received", "first"),
        ("execution.resumed", "signal received: first"),
        ("intent.accepted", None),  # wait "second": already pending, so no execution.blocked
        ("execution.resumed", "signal received: second"),
        ("intent.accepted", None),  # complete
        ("execution.completed", None),
    ]
    received = [e["payload"] for e in events if e["type"] == "signal.received"]
    assert received == [
        {"signal_type": "second", "payload": {"n": 2}},
        {"signal_type": "first", "payload": {"n": 1}},
    ]


def test_signal_to_a_pending_execution_reaches_a_later_wait(sandbox: Sandbox, kernel: Kernel) -> None:
    """The signal arrives before any agent holds the execution; the kernel hands it over on wait."""
    agent_id = unique("signal")
    eid = create(kernel, agent_id, {"op": "signal", "signals": ["go"]})
    assert kernel.status(eid) == "pending"
    assert send(kernel, eid, "go", {"v": 42}) == "ok"
    assert kernel.status(eid) == "pending"

    agent = sandbox.agent(kernel, agent_id, unique("signal-c"))
    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15)
    assert final["status"] == "completed", final
    assert final["output"] == {"payloads": [{"v": 42}], "consumer": agent.consumer_id}
    assert kernel.event_types(eid) == [
        "execution.created",
        "signal.received",
        "execution.started",
        "intent.accepted",  # wait "go", satisfied by the pending signal
        "execution.resumed",
        "intent.accepted",  # complete
        "execution.completed",
    ]


def test_signal_to_a_finished_execution_is_a_conflict(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("signal")
    sandbox.agent(kernel, agent_id, unique("signal-c"))

    async def scenario():
        async with Client(kernel.url) as client:
            done = await client.run_until_complete(agent_id, input={"op": "work", "n": 1})
            assert done.status == ExecutionStatus.COMPLETED
            with pytest.raises(ConflictError) as conflict:
                await client.send_signal(done.id, "late")
            with pytest.raises(NotFoundError) as missing:
                await client.send_signal("0190a1b2-0000-7000-8000-000000000000", "x")
            return conflict.value, missing.value

    conflict, missing = run(scenario())
    assert conflict.status_code == 409
    assert missing.status_code == 404
