"""(g) A tool denied by a YAML policy raises the SDK's PolicyError inside the handler."""

from __future__ import annotations

from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import Sandbox, run, unique

POLICY = """\
rules:
  - id: deny-x
    priority: 1
    when:
      tool_id: "danger.*"
    then:
      decision: deny
      reason: "not allowed"
default:
  decision: allow
"""


def test_denied_tool_raises_policy_error(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "policy.yaml"
    policy.write_text(POLICY)
    kernel = sandbox.kernel("--policy", str(policy))
    agent_id = unique("policy")
    agent = sandbox.agent(kernel, agent_id, unique("policy-c"))

    async def scenario():
        async with Client(kernel.url) as client:
            caught = await client.run_until_complete(
                agent_id, input={"op": "policy", "catch": True, "value": "hi"}
            )
            uncaught = await client.run_until_complete(agent_id, input={"op": "policy"})
            return (
                caught,
                await client.events_snapshot(caught.id),
                uncaught,
                await client.events_snapshot(uncaught.id),
            )

    caught, caught_log, uncaught, uncaught_log = run(scenario(), timeout=15)

    # Caught in the handler: the allowed tool ran, the denied one raised PolicyError.
    assert caught.status == ExecutionStatus.COMPLETED
    assert caught.output["echo"] == "hi"
    assert caught.output["error_type"] == "PolicyError"
    assert "not allowed" in caught.output["denied"]
    denied = [e for e in caught_log if e.type == "intent.denied"]
    assert len(denied) == 1
    assert denied[0].payload["tool_id"] == "danger.rm"
    assert denied[0].payload["rule_id"] == "deny-x"
    assert denied[0].payload["reason"] == "not allowed"
    steps = [e.tool_id for e in caught_log if e.type == "step.created"]
    assert steps == ["safe.echo"]  # a denied call creates no step

    # Not caught: the SDK turns the PolicyError into a fail intent.
    assert uncaught.status == ExecutionStatus.FAILED
    failed = uncaught_log[-1]
    assert failed.type == "execution.failed"
    assert "not allowed" in failed.payload["error"]
    assert [e.type for e in uncaught_log].count("intent.denied") == 1

    # The body of the denied tool never ran.
    assert not agent.markers("danger-ran")
