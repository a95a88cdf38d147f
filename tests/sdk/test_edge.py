"""Edges the SDK reaches in ordinary use: parallel tool calls, large results, failing
handlers, step timeouts, bearer tokens."""

from __future__ import annotations

import pytest
from rebuno import Client, UnauthorizedError
from rebuno.types import ExecutionStatus

from harness import Kernel, Sandbox, run, unique


def run_one(kernel: Kernel, agent_id: str, inp: dict, timeout: float = 15, api_key: str = ""):
    async def go():
        async with Client(kernel.url, api_key=api_key) as client:
            final = await client.run_until_complete(agent_id, input=inp)
            return final, await client.events_snapshot(final.id, limit=1000)

    return run(go(), timeout)


def test_parallel_tool_calls(sandbox: Sandbox, kernel: Kernel) -> None:
    """asyncio.gather over local and remote tools: every intent is accepted while tool steps
    block the execution, and complete succeeds once all of them ended."""
    runner = sandbox.runner(kernel, unique("calc-runner"), unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("parallel")
    sandbox.agent(kernel, agent_id, unique("parallel-c"))
    final, events = run_one(kernel, agent_id, {"op": "parallel", "remote": True})
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["results"] == [3, "PAR!", 0.2, 12]
    types = [e.type for e in events]
    assert types.count("step.created") == 4
    assert types.count("step.completed") == 4
    tool_blocks = [e for e in events if e.type == "execution.blocked"]
    assert tool_blocks and all(e.payload["reason"] == "tool" for e in tool_blocks)
    assert types.count("execution.resumed") == len(tool_blocks)
    # The last tool step's end resumed the execution before complete was accepted.
    assert types[-3:] == ["execution.resumed", "intent.accepted", "execution.completed"]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def test_large_local_tool_result(sandbox: Sandbox, kernel: Kernel) -> None:
    """A 3 MiB step result is over the 1 MiB default body limit of ordinary routes."""
    agent_id = unique("big")
    sandbox.agent(kernel, agent_id, unique("big-c"))
    size = 3 * 1024 * 1024
    final, events = run_one(kernel, agent_id, {"op": "big", "size": size})
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["length"] == size
    completed = [e for e in events if e.type == "step.completed"]
    assert len(completed[0].payload["result"]) == size


@pytest.mark.parametrize(
    ("error", "recorded"),
    [("boom", "boom"), ("", "agent failed without a message")],
)
def test_failing_handler_fails_the_execution(
    sandbox: Sandbox, kernel: Kernel, error: str, recorded: str
) -> None:
    agent_id = unique("fail")
    sandbox.agent(kernel, agent_id, unique("fail-c"))
    final, events = run_one(kernel, agent_id, {"op": "fail", "error": error})
    assert final.status == ExecutionStatus.FAILED, final
    assert events[-1].type == "execution.failed"
    assert events[-1].payload["error"] == recorded
    # The execution object says why (a Keel field the rebuno SDK parsed past, above), in GET
    # and in the list.
    assert kernel.get(f"/v0/executions/{final.id}")["error"] == recorded
    listed = kernel.get("/v0/executions", agent_id=agent_id)["executions"]
    assert [e["error"] for e in listed] == [recorded]


def test_step_timeout_fails_the_execution_and_stops_the_handler(sandbox: Sandbox) -> None:
    kernel = sandbox.kernel("--step-timeout", "1s")
    agent_id = unique("timeout")
    agent = sandbox.agent(kernel, agent_id, unique("timeout-c"))
    final, events = run_one(kernel, agent_id, {"op": "slow_tool", "sleep": 4})
    assert final.status == ExecutionStatus.FAILED, final
    types = [e.type for e in events]
    assert "step.timed_out" in types
    assert events[-1].type == "execution.failed"
    assert events[-1].payload["error"] == "step timed out"
    assert kernel.get(f"/v0/executions/{final.id}")["error"] == "step timed out"
    # The kernel told the agent (execution.cancelled push); the SDK cancelled the handler.
    agent.wait_marker("cancelled", final.id, timeout=5)
    assert not [m for m in agent.markers("done") if m["execution_id"] == final.id]


def test_bearer_token(sandbox: Sandbox) -> None:
    token = "s3cret-token"
    kernel = sandbox.kernel("--bearer-token", token)
    agent_id = unique("auth")
    agent = sandbox.agent(kernel, agent_id, unique("auth-c"), api_key=token)
    final, _ = run_one(
        kernel, agent_id, {"op": "tools", "a": 1, "b": 1, "word": "ok"}, api_key=token
    )
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output == {"sum": 2, "shout": "OK!", "consumer": agent.consumer_id}

    async def anonymous():
        async with Client(kernel.url, api_key="") as client:
            with pytest.raises(UnauthorizedError) as wrong:
                await client.list()
            return wrong.value

    assert run(anonymous()).status_code == 401


def test_execution_timeout_fails_a_waiting_execution(sandbox: Sandbox) -> None:
    kernel = sandbox.kernel("--execution-timeout", "2s")
    agent_id = unique("exec-timeout")
    agent = sandbox.agent(kernel, agent_id, unique("exec-timeout-c"))
    final, events = run_one(kernel, agent_id, {"op": "hold", "signal": "never"})
    assert final.status == ExecutionStatus.FAILED, final
    assert events[-1].type == "execution.failed"
    assert events[-1].payload["error"] == "execution exceeded maximum duration"
    agent.wait_marker("cancelled", final.id, timeout=5)
