"""(a) An SDK agent with two local @tools, driven by Client.run_until_complete and Client.create."""

from __future__ import annotations

from rebuno import Client
from rebuno.types import Event, ExecutionStatus

from harness import Kernel, Sandbox, run, unique

# What one handler run with two local tool calls leaves in the log. Tool steps block the
# execution (reason "tool") until their result arrives (Keel decision, WIRE.md top).
TWO_LOCAL_TOOLS = [
    "execution.created",
    "execution.started",
    "intent.accepted",  # invoke_tool math.add
    "step.created",
    "execution.blocked",
    "step.completed",
    "execution.resumed",
    "intent.accepted",  # invoke_tool text.shout
    "step.created",
    "execution.blocked",
    "step.completed",
    "execution.resumed",
    "intent.accepted",  # complete
    "execution.completed",
]


def assert_contiguous(events: list[Event], execution_id: str) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert all(e.execution_id == execution_id for e in events)
    assert len({e.id for e in events}) == len(events)
    assert all(e.schema_version == 1 and e.timestamp is not None for e in events)


def check_two_tool_log(events: list[Event], execution_id: str, consumer: str) -> None:
    assert [e.type for e in events] == TWO_LOCAL_TOOLS
    assert_contiguous(events, execution_id)
    started = events[1]
    assert started.payload["consumer_id"] == consumer
    assert started.payload["session_id"]

    add_step, shout_step = events[3], events[8]
    assert add_step.tool_id == "math.add" and add_step.arguments == {"a": 2, "b": 3}
    assert shout_step.tool_id == "text.shout" and shout_step.arguments == {"text": "keel"}
    assert add_step.step_id and shout_step.step_id and add_step.step_id != shout_step.step_id

    for created, blocked, done, resumed in ((3, 4, 5, 6), (8, 9, 10, 11)):
        step_id = events[created].step_id
        assert events[blocked].payload["reason"] == "tool"
        assert events[blocked].payload["ref"] == step_id
        assert events[done].step_id == step_id
        assert events[resumed].payload["reason"]
    assert events[5].payload["result"] == 5
    assert events[10].payload["result"] == "KEEL!"

    invoke = events[2].payload
    assert invoke["intent_type"] == "invoke_tool"
    assert invoke["details"]["tool_id"] == "math.add"
    assert events[12].payload["intent_type"] == "complete"
    assert events[13].payload["output"] == {"sum": 5, "shout": "KEEL!", "consumer": consumer}


def test_two_local_tools_run_until_complete(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("local")
    agent = sandbox.agent(kernel, agent_id, unique("local-c"))
    inp = {"op": "tools", "a": 2, "b": 3, "word": "keel"}

    async def scenario():
        async with Client(kernel.url) as client:
            streamed: list[Event] = []
            final = await client.run_until_complete(
                agent_id, input=inp, labels={"suite": "sdk"}, on_event=streamed.append
            )
            snapshot = await client.events_snapshot(final.id)
            return final, streamed, snapshot

    final, streamed, snapshot = run(scenario(), timeout=15)

    assert final.status == ExecutionStatus.COMPLETED
    assert final.agent_id == agent_id
    assert final.labels == {"suite": "sdk"}
    assert final.input == inp
    assert final.output == {"sum": 5, "shout": "KEEL!", "consumer": agent.consumer_id}
    assert final.created_at is not None and final.updated_at >= final.created_at

    check_two_tool_log(snapshot, final.id, agent.consumer_id)
    # The live stream delivered exactly the persisted log, in order, and stopped at the end.
    assert [e.id for e in streamed] == [e.id for e in snapshot]


def test_two_local_tools_create_then_stream(sandbox: Sandbox, kernel: Kernel) -> None:
    agent_id = unique("local")
    # The execution is created before any agent exists: it waits as pending.
    async def create():
        async with Client(kernel.url) as client:
            return await client.create(agent_id, input={"op": "tools", "a": 2, "b": 3, "word": "keel"})

    created = run(create())
    assert created.status == ExecutionStatus.PENDING
    assert created.output is None

    agent = sandbox.agent(kernel, agent_id, unique("local-c"))

    async def follow():
        async with Client(kernel.url) as client:
            events = [e async for e in client.events(created.id)]
            return events, await client.get(created.id)

    events, final = run(follow(), timeout=15)
    assert final.status == ExecutionStatus.COMPLETED
    assert final.output == {"sum": 5, "shout": "KEEL!", "consumer": agent.consumer_id}
    check_two_tool_log(events, created.id, agent.consumer_id)


def test_local_tool_failure_is_reported_to_the_agent(sandbox: Sandbox, kernel: Kernel) -> None:
    """A failed local step does not fail the execution: the handler catches ToolError."""
    agent_id = unique("local")
    sandbox.agent(kernel, agent_id, unique("local-c"))

    async def scenario():
        async with Client(kernel.url) as client:
            final = await client.run_until_complete(
                agent_id, input={"op": "tool_error", "reason": "disk on fire"}
            )
            return final, await client.events_snapshot(final.id)

    final, events = run(scenario(), timeout=15)
    assert final.status == ExecutionStatus.COMPLETED
    assert final.output["tool_error"] == "disk on fire"
    failed = [e for e in events if e.type == "step.failed"]
    assert len(failed) == 1
    assert failed[0].payload["error"] == "disk on fire"
    assert failed[0].payload["retryable"] is False
    assert "step.retried" not in [e.type for e in events]
    assert_contiguous(events, final.id)
