"""`concurrency.max_running` with the unmodified SDK agent: executions beyond the limit stay
pending and run one after another, in creation order; every one completes."""

from __future__ import annotations

from rebuno import Client

from harness import Sandbox, run, unique

POLICY = """\
concurrency:
  max_running: 1
rules:
  - id: allow-all
    priority: 1
    when: {}
    then:
      decision: allow
"""


def test_executions_beyond_max_running_wait_and_run_in_creation_order(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "policy.yaml"
    policy.write_text(POLICY)
    kernel = sandbox.kernel("--policy", str(policy))
    agent_id = unique("serial")
    agent = sandbox.agent(kernel, agent_id, unique("serial-c"))
    agent.wait_connected()

    async def scenario():
        async with Client(kernel.url) as client:
            return [
                await client.create(agent_id, input={"op": "work", "n": n, "sleep": 0.3})
                for n in range(3)
            ]

    created = run(scenario(), timeout=15)
    ids = [execution.id for execution in created]
    done = [kernel.wait_status(eid, "completed", timeout=15) for eid in ids]

    assert [execution["output"]["n"] for execution in done] == [0, 1, 2]
    # One at a time: each execution starts after the previous one finished.
    order = [(m["event"], m["execution_id"]) for m in agent.markers() if m["event"] != "cancelled"]
    assert order == [(event, eid) for eid in ids for event in ("start", "done")], order
