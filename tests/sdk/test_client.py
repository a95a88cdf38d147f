"""(d) Client calls: list with filters and paging, get, events_snapshot, events(), cancel."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing

import httpx
import pytest
from rebuno import Client, ConflictError, NotFoundError
from rebuno.types import Event, ExecutionStatus

from harness import Kernel, Sandbox, run, unique


def test_client_calls(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("client")
    idle_agent = unique("nobody")  # no process serves it: its executions stay pending
    agent = sandbox.agent(kernel, agent_id, unique("client-c"))
    hold = {"op": "hold", "signal": "finish"}

    async def setup():
        async with Client(kernel.url) as client:
            e1 = await client.create(agent_id, input=hold, labels={"team": "a", "tier": "1"})
            e2 = await client.create(agent_id, input=hold, labels={"team": "a", "tier": "2"})
            e3 = await client.create(agent_id, input=hold, labels={"team": "b"})
            p1 = await client.create(idle_agent, input={"x": 1})
            return e1.id, e2.id, e3.id, p1.id

    e1, e2, e3, p1 = run(setup())
    for eid in (e1, e2, e3):
        kernel.wait_status(eid, "blocked")
        agent.wait_marker("start", eid)

    async def reads():
        async with Client(kernel.url) as client:
            everything = await client.list(agent_id=agent_id)
            team_a = await client.list(agent_id=agent_id, labels={"team": "a"})
            team_a1 = await client.list(labels={"team": "a", "tier": "1"})
            blocked = await client.list(status=ExecutionStatus.BLOCKED, agent_id=agent_id)
            pending = await client.list(status=ExecutionStatus.PENDING, agent_id=idle_agent)
            none = await client.list(status=ExecutionStatus.COMPLETED, agent_id=agent_id)
            pages, cursor = [], ""
            while True:
                page = await client.list(agent_id=agent_id, limit=1, cursor=cursor)
                pages.append(page)
                cursor = page.next_cursor
                if not cursor:
                    break
                assert len(pages) < 10, "paging does not end"
            got = await client.get(e1)
            snapshot = await client.events_snapshot(e1)
            window = await client.events_snapshot(e1, after_sequence=1, limit=2)
            with pytest.raises(NotFoundError):
                await client.get("0190a1b2-0000-7000-8000-000000000000")
            return everything, team_a, team_a1, blocked, pending, none, pages, got, snapshot, window

    everything, team_a, team_a1, blocked, pending, none, pages, got, snapshot, window = run(reads())

    # Newest first.
    assert [s.id for s in everything.executions] == [e3, e2, e1]
    assert everything.next_cursor == ""
    assert {s.id for s in team_a.executions} == {e1, e2}
    assert [s.id for s in team_a1.executions] == [e1]
    assert {s.id for s in blocked.executions} == {e1, e2, e3}
    assert all(s.status == ExecutionStatus.BLOCKED for s in blocked.executions)
    assert [s.id for s in pending.executions] == [p1]
    assert pending.executions[0].labels == {}
    assert none.executions == []
    assert [p.executions[0].id for p in pages] == [e3, e2, e1]
    assert all(len(p.executions) == 1 for p in pages)
    assert everything.executions[2].labels == {"team": "a", "tier": "1"}

    assert got.id == e1 and got.status == ExecutionStatus.BLOCKED
    assert got.agent_id == agent_id and got.input == hold
    assert got.labels == {"team": "a", "tier": "1"} and got.output is None

    assert [e.type for e in snapshot][:2] == ["execution.created", "execution.started"]
    assert snapshot[-1].type == "execution.blocked"
    assert snapshot[-1].payload["reason"] == "signal" and snapshot[-1].payload["ref"] == "finish"
    assert [e.sequence for e in snapshot] == list(range(1, len(snapshot) + 1))
    assert [e.sequence for e in window] == [2, 3]
    assert [e.id for e in window] == [e.id for e in snapshot[1:3]]

    # events(): a live stream that replays the log, then follows it to the terminal event.
    async def stream_then_finish():
        async with Client(kernel.url) as client:
            seen: list[Event] = []

            async def follow():
                async for event in client.events(e1):
                    seen.append(event)

            task = asyncio.create_task(follow())
            await asyncio.wait_for(_until(lambda: len(seen) >= len(snapshot)), 5)
            replayed = len(seen)
            await client.send_signal(e1, "finish", {"by": "test"})
            await asyncio.wait_for(task, 10)
            async with aclosing(client.events(e1, after_sequence=len(snapshot))) as tail:
                resumed = await anext(tail)
            return seen, replayed, resumed

    seen, replayed, resumed = run(stream_then_finish())
    assert replayed == len(snapshot)
    assert [e.id for e in seen[:replayed]] == [e.id for e in snapshot]
    assert seen[-1].type == "execution.completed"
    assert seen[-1].payload["output"] == {"finished": {"by": "test"}, "consumer": agent.consumer_id}
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
    assert resumed.id == seen[replayed].id  # after_sequence resumes where we left off

    # cancel(): the kernel tells the agent, the SDK cancels the handler task.
    async def cancel():
        async with Client(kernel.url) as client:
            cancelled = await client.cancel(e2)
            with pytest.raises(ConflictError):
                await client.cancel(e2)
            cancelled_pending = await client.cancel(p1)
            # The stream of a finished execution replays and closes at its terminal event.
            replay = [e async for e in client.events(e2)]
            return cancelled, cancelled_pending, replay

    cancelled, cancelled_pending, replay = run(cancel())
    assert cancelled.id == e2 and cancelled.status == ExecutionStatus.CANCELLED
    assert cancelled_pending.status == ExecutionStatus.CANCELLED
    assert replay[-1].type == "execution.cancelled"
    assert replay[-1].payload["reason"] == "cancelled by request"
    agent.wait_marker("cancelled", e2, timeout=5)
    assert not [m for m in agent.markers("done") if m["execution_id"] == e2]

    # The handler was cancelled cleanly: it sent no fail intent, nothing follows the cancel.
    log = kernel.events(e2)
    types = [e["type"] for e in log]
    assert types[-1] == "execution.cancelled"
    assert "execution.failed" not in types
    assert [e["sequence"] for e in log] == list(range(1, len(log) + 1))
    assert kernel.status(e3) == "blocked"  # the other executions are untouched
    # Give the agent a moment to misbehave (e.g. a late fail intent), then re-check.
    time.sleep(0.5)
    assert [e["type"] for e in kernel.events(e2)] == types


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.02)


def test_client_run_yields_events_until_the_end(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("client-run")
    sandbox.agent(kernel, agent_id, unique("client-run-c"))

    async def scenario():
        async with Client(kernel.url) as client:
            events = [e async for e in client.run(agent_id, input={"op": "work", "n": 7})]
            return events, await client.get(events[0].execution_id)

    events, final = run(scenario())
    assert events[0].type == "execution.created"
    assert events[-1].type == "execution.completed"
    assert final.output == {"n": 7, "consumer": final.output["consumer"]}


def test_non_string_label_is_rejected_and_agents_keep_working(sandbox: Sandbox, kernel: Kernel) -> None:
    """One execution with a non-string label would break every SDK agent's stream parsing,
    so create refuses it (WIRE.md corrections, item 3)."""
    agent_id = unique("labels")
    sandbox.agent(kernel, agent_id, unique("labels-c"))
    r = httpx.post(
        kernel.url + "/v0/executions",
        json={"agent_id": agent_id, "input": {"op": "work", "n": 1}, "labels": {"n": 1}},
        timeout=5,
    )
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "VALIDATION_ERROR"

    async def scenario():
        async with Client(kernel.url) as client:
            return await client.run_until_complete(
                agent_id, input={"op": "work", "n": 2}, labels={"n": "2"}
            )

    final = run(scenario())
    assert final.status == ExecutionStatus.COMPLETED
    assert final.labels == {"n": "2"}
