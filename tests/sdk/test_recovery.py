"""Sessions that outlive idle handlers and kernel restarts."""

from __future__ import annotations

from rebuno import Client

from harness import Kernel, Sandbox, run, unique


def create(kernel: Kernel, agent_id: str, inp: dict) -> str:
    async def go():
        async with Client(kernel.url) as client:
            return (await client.create(agent_id, input=inp)).id

    return run(go())


def sessions_started(kernel: Kernel, eid: str) -> list[str]:
    return [e["payload"]["session_id"] for e in kernel.events(eid) if e["type"] == "execution.started"]


def test_idle_handler_keeps_its_session_while_connected(sandbox: Sandbox, kernel: Kernel) -> None:
    """A handler silent for longer than --agent-timeout (1 s) still owns its execution."""
    agent_id = unique("idle")
    agent = sandbox.agent(kernel, agent_id, unique("idle-c"))
    eid = create(kernel, agent_id, {"op": "idle", "sleep": 2.5})
    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15)
    assert final["status"] == "completed", final
    assert final["output"] == {"sum": 42, "consumer": agent.consumer_id}
    types = kernel.event_types(eid)
    assert types.count("execution.started") == 1
    assert "execution.reset" not in types and "agent.timeout" not in types


def test_kernel_restart_is_transparent_to_a_connected_agent(sandbox: Sandbox) -> None:
    """kill -9 the kernel while one execution waits on a signal and another is mid-handler:
    after the restart the SDK reconnects with its consumer_id and both carry on with their
    original sessions (DESIGN.md §3, startup recovery)."""
    kernel = sandbox.kernel(agent_timeout="5s")
    agent_id = unique("restart")
    agent = sandbox.agent(kernel, agent_id, unique("restart-c"))
    waiting = create(kernel, agent_id, {"op": "restart", "signal": "resume"})
    busy = create(kernel, agent_id, {"op": "restart", "sleep": 3})
    kernel.wait_status(waiting, "blocked")
    agent.wait_marker("start", busy)

    kernel.restart()
    agent.proc.wait_for_log(r'(?s)/v0/agents/stream\S* "HTTP/1\.1 200.*/v0/agents/stream\S* "HTTP/1\.1 200', timeout=10)

    async def signal():
        async with Client(kernel.url) as client:
            return await client.send_signal(waiting, "resume", {"after": "restart"})

    assert run(signal()).status == "ok"
    finals = {eid: kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15) for eid in (waiting, busy)}
    for eid, final in finals.items():
        assert final["status"] == "completed", final
        started = sessions_started(kernel, eid)
        assert len(started) == 1, kernel.event_types(eid)
        assert final["output"]["session"] == started[0]
        types = kernel.event_types(eid)
        assert "execution.reset" not in types
        events = kernel.events(eid)
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert finals[waiting]["output"]["payload"] == {"after": "restart"}
    assert finals[busy]["output"]["sum"] == 2


def test_kernel_restart_while_a_runner_holds_a_job(sandbox: Sandbox) -> None:
    """The runner finishes its job while the kernel restarts; it re-attaches with its
    consumer_id and posts the result, which is accepted: the job ran once."""
    kernel = sandbox.kernel("--runner-timeout", "5s", agent_timeout="5s")
    runner = sandbox.runner(kernel, unique("calc-runner"), unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("restart-job")
    sandbox.agent(kernel, agent_id, unique("restart-job-c"))
    eid = create(kernel, agent_id, {"op": "call", "tool": "calc_slow", "args": {"seconds": 2}})
    kernel.wait_event(eid, "step.started")

    kernel.restart()
    final = kernel.wait_status(eid, "completed", "failed", "cancelled", timeout=15)
    assert final["status"] == "completed", final
    assert final["output"]["result"]["slept"] == 2
    assert len(runner.markers("job")) == 1, runner.markers()
    types = kernel.event_types(eid)
    assert types.count("step.started") == 1 and types.count("step.completed") == 1
    assert "step.retried" not in types and "execution.reset" not in types
    assert types.count("execution.started") == 1
