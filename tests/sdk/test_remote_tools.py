"""(b) A Runner hosting remote tools; one fails once with ToolError(retryable=True)."""

from __future__ import annotations

import uuid

from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import Kernel, Sandbox, run, unique, wait_until


def test_remote_tools_with_a_retried_failure(sandbox: Sandbox, kernel: Kernel) -> None:
    runner_id = unique("calc-runner")
    runner = sandbox.runner(kernel, runner_id, unique("calc-runner-c"))
    runner.wait_connected("runners")

    # The runner published its schemas before connecting; the directory lists them.
    def directory():
        tools = kernel.get("/v0/tools", prefix="calc")
        return tools if {t["id"] for t in tools} == {"calc_mul", "calc_flaky", "calc_slow"} else None

    tools = wait_until("calc_* tools in /v0/tools", directory, timeout=10)
    for t in tools:
        assert t["runner_id"] == runner_id
        assert t["input_schema"]["type"] == "object"
        assert t["description"]
    mul_schema = next(t for t in tools if t["id"] == "calc_mul")["input_schema"]
    assert mul_schema["required"] == ["a", "b"]

    agent_id = unique("remote")
    agent = sandbox.agent(kernel, agent_id, unique("remote-c"))
    token = uuid.uuid4().hex

    async def scenario():
        async with Client(kernel.url) as client:
            final = await client.run_until_complete(
                agent_id, input={"op": "remote", "a": 6, "b": 7, "token": token}
            )
            return final, await client.events_snapshot(final.id, limit=1000)

    final, events = run(scenario(), timeout=20)

    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output == {
        "product": 42,
        "flaky": {"token": token, "ok": True},
        "remote_tools": ["calc_flaky", "calc_mul", "calc_slow"],
        "consumer": agent.consumer_id,
    }
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))

    created = {e.payload["tool_id"]: e for e in events if e.type == "step.created"}
    assert set(created) == {"calc_mul", "calc_flaky"}
    assert created["calc_flaky"].payload["max_attempts"] == 3

    mul_step = [e.type for e in events if e.step_id == created["calc_mul"].step_id]
    assert mul_step == ["step.created", "step.dispatched", "step.started", "step.completed"]

    flaky = [e for e in events if e.step_id == created["calc_flaky"].step_id]
    assert [e.type for e in flaky] == [
        "step.created",
        "step.dispatched",
        "step.started",
        "step.failed",
        "step.retried",
        "step.dispatched",
        "step.started",
        "step.completed",
    ]
    failed, retried, completed = flaky[3], flaky[4], flaky[7]
    assert failed.payload["retryable"] is True
    assert failed.payload["error"] == "temporary failure, try again"
    assert retried.payload["next_attempt"] == 2
    assert completed.payload["result"] == {"token": token, "ok": True}
    # Both dispatches name this runner (the first may be the direct dispatch at intent time).
    assert flaky[5].payload["runner_id"] == runner_id
    assert flaky[5].payload["job_id"] and flaky[5].payload["job_id"] != flaky[1].payload["job_id"]

    # Each tool step blocked the execution and its result resumed it.
    blocked = [e for e in events if e.type == "execution.blocked"]
    assert [b.payload["reason"] for b in blocked] == ["tool", "tool"]

    jobs = runner.markers("job")
    assert [(j["tool_id"], j.get("outcome")) for j in jobs] == [
        ("calc_mul", None),
        ("calc_flaky", "retryable-failure"),
        ("calc_flaky", "success"),
    ]
