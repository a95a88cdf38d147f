"""Runner connections: a runner killed mid-job, a job whose execution is cancelled."""

from __future__ import annotations

import time
from datetime import datetime

import httpx

from harness import Kernel, Sandbox, unique


def create(kernel: Kernel, agent_id: str, inp: dict) -> str:
    r = httpx.post(kernel.url + "/v0/executions", json={"agent_id": agent_id, "input": inp}, timeout=5)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_job_of_a_killed_runner_moves_to_another_runner(sandbox: Sandbox) -> None:
    kernel = sandbox.kernel("--runner-timeout", "1s")
    stuck = sandbox.runner(kernel, unique("calc-a"), unique("calc-a-c"), hang=True)
    stuck.wait_connected("runners")
    agent_id = unique("runner-crash")
    sandbox.agent(kernel, agent_id, unique("runner-crash-c"))

    eid = create(kernel, agent_id, {"op": "call", "tool": "calc_slow", "args": {"seconds": 0.1}})
    stuck.wait_marker("job")
    started = kernel.wait_event(eid, "step.started")[0]
    stuck_runner = started["payload"]["runner_id"]

    healthy = sandbox.runner(kernel, unique("calc-b"), unique("calc-b-c"))
    healthy.wait_connected("runners")
    killed_at = time.time()
    stuck.proc.kill()

    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15)
    assert final["status"] == "completed", final
    healthy_runner = final["output"]["result"]["runner"]
    assert healthy_runner != stuck_runner

    step = [e for e in kernel.events(eid) if e.get("step_id") == started["step_id"]]
    runners = [e["payload"]["runner_id"] for e in step if e["type"] == "step.started"]
    assert runners == [stuck_runner, healthy_runner]
    assert step[-1]["type"] == "step.completed"
    # Re-dispatched only after the runner grace (--runner-timeout 1s).
    second = [e for e in step if e["type"] == "step.started"][1]
    moved_after = datetime.fromisoformat(second["timestamp"]).timestamp() - killed_at
    assert moved_after >= 0.8, f"job moved {moved_after:.2f}s after the kill"


def test_cancelled_job_frees_its_runner(sandbox: Sandbox, kernel: Kernel) -> None:
    """The only runner is busy with a 10 s job when its execution is cancelled: the runner
    connection becomes idle at once and takes the next job without waiting for the old one."""
    runner = sandbox.runner(kernel, unique("calc-one"), unique("calc-one-c"))
    runner.wait_connected("runners")
    agent_id = unique("runner-cancel")
    sandbox.agent(kernel, agent_id, unique("runner-cancel-c"))

    slow = create(kernel, agent_id, {"op": "call", "tool": "calc_slow", "args": {"seconds": 10}})
    kernel.wait_event(slow, "step.started")
    r = httpx.post(f"{kernel.url}/v0/executions/{slow}/cancel", json={}, timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"

    began = time.monotonic()
    quick = create(kernel, agent_id, {"op": "call", "tool": "calc_mul", "args": {"a": 2, "b": 21}})
    final = kernel.wait_status(quick, "completed", "failed", "cancelled", timeout=8)
    assert final["status"] == "completed", final
    assert final["output"]["result"] == 42
    assert time.monotonic() - began < 5, "the next job waited for the cancelled one"
    types = kernel.event_types(slow)
    assert types[-1] == "execution.cancelled" and "step.cancelled" in types
    assert "step.completed" not in types
