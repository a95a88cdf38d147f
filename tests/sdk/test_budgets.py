"""A call over an execution budget reaches the unmodified SDK agent as a policy denial
(PolicyError), and the additive `budget` field of the execution does not disturb the Client."""

from __future__ import annotations

from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import Sandbox, run, unique

POLICY = """\
budget:
  max_steps: 3
rules:
  - id: allow-all
    priority: 1
    when: {}
    then:
      decision: allow
"""


def test_a_budget_denial_raises_policy_error_in_the_handler(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "policy.yaml"
    policy.write_text(POLICY)
    kernel = sandbox.kernel("--policy", str(policy))
    agent_id = unique("budget")
    sandbox.agent(kernel, agent_id, unique("budget-c"))

    async def scenario():
        async with Client(kernel.url) as client:
            done = await client.run_until_complete(agent_id, input={"op": "budget"})
            return done, await client.events_snapshot(done.id), await client.get(done.id)

    done, log, fetched = run(scenario(), timeout=15)

    assert done.status == ExecutionStatus.COMPLETED
    assert done.output["calls"] == 3
    assert done.output["error_type"] == "PolicyError"
    assert "budget exceeded: max_steps 3 reached" in done.output["denied"]
    denied = [e for e in log if e.type == "intent.denied"]
    assert len(denied) == 1
    assert denied[0].payload["reason"] == (
        "budget exceeded: max_steps 3 reached (3 tool steps so far)"
    )
    assert denied[0].payload["rule_id"] == "allow-all"
    assert [e.type for e in log].count("step.created") == 3
    # GET answers the additive `budget` object; the SDK's model reads the execution anyway.
    assert fetched.id == done.id
    assert fetched.status == ExecutionStatus.COMPLETED
