"""Human approval: require_approval rules, `step.approve` signals, local and remote tools."""

from __future__ import annotations

import httpx
from rebuno import Client

from harness import Kernel, Sandbox, run, unique, wait_until

POLICY = """\
rules:
  - id: approve-guarded
    priority: 1
    when:
      tool_id: "guarded.*"
    then:
      decision: require_approval
      reason: "a human must agree"
  - id: approve-mul
    priority: 2
    when:
      tool_id: calc_mul
    then:
      decision: require_approval
      reason: "multiplication is serious"
default:
  decision: allow
"""


def approval_blocks(kernel: Kernel, eid: str) -> list[dict]:
    return [
        e for e in kernel.events(eid)
        if e["type"] == "execution.blocked" and e["payload"]["reason"] == "approval"
    ]


def resolve(kernel: Kernel, eid: str, nth: int, approved: bool, reason: str = "") -> dict:
    """Wait for the nth approval block, then answer it with a step.approve signal."""
    block = wait_until(
        f"approval request #{nth}",
        lambda: (blocks := approval_blocks(kernel, eid)) and len(blocks) >= nth and blocks[nth - 1],
    )
    assert kernel.status(eid) == "blocked"
    payload = {"step_id": block["payload"]["ref"], "approved": approved}
    if reason:
        payload["reason"] = reason

    async def send():
        async with Client(kernel.url) as client:
            return await client.send_signal(eid, "step.approve", payload)

    assert run(send()).status == "ok"
    return block


def test_approved_and_denied_tool_calls(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "approval.yaml"
    policy.write_text(POLICY)
    kernel = sandbox.kernel("--policy", str(policy))
    runner = sandbox.runner(kernel, unique("calc-runner"), unique("calc-runner-c"))
    runner.wait_connected("runners")
    agent_id = unique("approval")
    agent = sandbox.agent(kernel, agent_id, unique("approval-c"))

    r = httpx.post(kernel.url + "/v0/executions", json={"agent_id": agent_id, "input": {"op": "approval"}})
    assert r.status_code == 201, r.text
    eid = r.json()["id"]

    local = resolve(kernel, eid, 1, approved=True)
    assert local["payload"]["tool_id"] == "guarded.echo"
    assert local["payload"]["remote"] is False
    remote = resolve(kernel, eid, 2, approved=True)
    assert remote["payload"]["tool_id"] == "calc_mul"
    assert remote["payload"]["remote"] is True
    denied = resolve(kernel, eid, 3, approved=False, reason="not today")

    final = kernel.wait_status(eid, "completed", "failed", "cancelled")
    assert final["status"] == "completed", final
    out = final["output"]
    assert out["local"] == "approved-local" and out["remote"] == 25
    assert "denied by human approval" in out["denied"]

    events = kernel.events(eid)
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    resumed = [e["payload"]["reason"] for e in events if e["type"] == "execution.resumed"]
    assert [r for r in resumed if r.startswith("approval")] == [
        "approval granted",
        "approval granted",
        "approval denied",
    ]
    required = [e for e in events if e["type"] == "step.approval_required"]
    assert [e["payload"]["reason"] for e in required] == [
        "a human must agree",
        "multiplication is serious",
        "a human must agree",
    ]
    denied_step = [e for e in events if e.get("step_id") == denied["payload"]["ref"]]
    # The step's own events end with its failure; the approval's decision follows it
    # (approval.resolved, after the rebuno events of the same transition).
    step_events = [e for e in denied_step if e["type"].startswith("step.")]
    assert step_events[-1]["type"] == "step.failed"
    assert step_events[-1]["payload"]["error"] == "not today"
    assert denied_step[-1]["type"] == "approval.resolved"
    assert denied_step[-1]["payload"]["decision"] == "denied"
    assert denied_step[-1]["payload"]["reason"] == "not today"
    # The guarded tool body ran only for the approved call; the runner ran calc_mul once.
    assert [m["value"] for m in agent.markers("guarded-ran")] == ["approved-local"]
    assert [m["tool_id"] for m in runner.markers("job")] == ["calc_mul"]
