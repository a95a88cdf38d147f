"""The unmodified rebuno SDK with scoped API keys (docs/security.md): an agent key, a runner key
and an operator key as the client's `api_key`; an agent key cannot approve its own call; an
approver key can; the deny reason is recorded."""

from __future__ import annotations

import uuid

import httpx
import pytest
from rebuno import Client
from rebuno.errors import RebunoError
from rebuno.types import ExecutionStatus

from harness import Sandbox, run, unique, wait_until

ROOT = "root-" + uuid.uuid4().hex

POLICY = """\
rules:
  - id: approve-mul
    priority: 1
    when:
      tool_id: calc_mul
    then:
      decision: require_approval
      reason: "multiplication is serious"
default:
  decision: allow
"""


def new_key(url: str, body: dict) -> str:
    r = httpx.post(url + "/v0/keys", json=body, headers={"Authorization": f"Bearer {ROOT}"}, timeout=5)
    assert r.status_code == 201, r.text
    return r.json()["secret"]


def admin_get(url: str, path: str) -> dict:
    r = httpx.get(url + path, headers={"Authorization": f"Bearer {ROOT}"}, timeout=5)
    r.raise_for_status()
    return r.json()


def test_scoped_keys_for_agent_runner_and_client(sandbox: Sandbox) -> None:
    policy = sandbox.workdir / "approval.yaml"
    policy.write_text(POLICY)
    kernel = sandbox.kernel("--policy", str(policy), "--bearer-token", ROOT)
    agent_id, runner_id = unique("billing"), unique("calc-runner")
    agent_key = new_key(kernel.url, {"name": "agent-key", "role": "agent", "scopes": {"agents": [agent_id]}})
    runner_key = new_key(kernel.url, {"name": "runner-key", "role": "runner", "scopes": {"runners": [runner_id], "tools": ["calc_*"]}})
    client_key = new_key(kernel.url, {"name": "client-key", "role": "operator"})
    approver_key = new_key(kernel.url, {"name": "alice", "role": "approver"})

    runner = sandbox.runner(kernel, runner_id, unique("calc-runner-c"), api_key=runner_key)
    runner.wait_connected("runners")
    agent = sandbox.agent(kernel, agent_id, unique("billing-c"), api_key=agent_key)
    agent.wait_connected("agents")
    token = uuid.uuid4().hex

    async def start():
        async with Client(kernel.url, api_key=client_key) as client:
            created = await client.create(agent_id, input={"op": "remote", "a": 6, "b": 7, "token": token})
            return created.id

    eid = run(start())

    def blocked() -> dict | None:
        events = admin_get(kernel.url, f"/v0/executions/{eid}/events?limit=1000")["events"]
        return next((e for e in events if e["type"] == "step.approval_required"), None)

    request = wait_until("the approval request", blocked, timeout=15)
    step_id = request["step_id"]
    payload = {"step_id": step_id, "approved": True}

    async def signal(key: str):
        async with Client(kernel.url, api_key=key) as client:
            return await client.send_signal(eid, "step.approve", payload)

    # The agent's own key cannot approve its call (the SDK raises on the 403) ...
    with pytest.raises(RebunoError):
        run(signal(agent_key))
    assert admin_get(kernel.url, f"/v0/executions/{eid}")["status"] == "blocked"
    # ... an approver's key can.
    assert run(signal(approver_key)).status == "ok"

    def done() -> dict | None:
        body = admin_get(kernel.url, f"/v0/executions/{eid}")
        return body if body["status"] in ("completed", "failed") else None

    wait_until("the execution to finish", done, timeout=20)

    async def finish():
        # The client key reads the execution and its events through the SDK.
        async with Client(kernel.url, api_key=client_key) as client:
            return await client.get(eid), await client.events_snapshot(eid, limit=1000)

    final, events = run(finish(), timeout=20)
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["product"] == 42 and final.output["flaky"]["ok"] is True
    # The SDK parsed every event, with the principals Keel adds and the approval objects.
    assert len(events) > 5
    assert {"approval.requested", "approval.resolved"} <= {e.type for e in events}
    logged = admin_get(kernel.url, f"/v0/executions/{eid}/events?limit=1000")["events"]
    assert len(events) == len(logged)
    assert all(e.get("principal") for e in logged), [e for e in logged if not e.get("principal")]
    assert {e["principal"] for e in logged if e["type"] == "intent.accepted"} == {"agent-key"}
    assert logged[0]["principal"] == "client-key"
    resolved = [e["payload"] for e in logged if e["type"] == "approval.resolved"]
    assert [(r["decision"], r["approver"]) for r in resolved] == [("approved", "alice")]
    # The same objects on the kernel-wide feed, which webhooks deliver.
    feed = admin_get(kernel.url, f"/v0/events?types=approval.*&execution_id={eid}")["events"]
    assert [e["type"] for e in feed] == ["approval.requested", "approval.resolved"]
    assert feed[0]["payload"]["approval_id"] == f"{eid}.{step_id}"
    assert logged[0]["payload"]["created_by"] == "client-key"
    approvals = [e for e in logged if e["type"] == "signal.received"]
    assert [e["payload"]["sent_by"] for e in approvals] == ["alice"]
    assert approvals[0]["payload"]["payload"]["answered_by"] == "alice"
    # Nothing of any key's secret was logged by the kernel.
    log = kernel.log_text()
    for secret in (agent_key, runner_key, client_key, approver_key, ROOT):
        assert secret[18:] not in log
    assert "request forbidden" in log and "agent-key" in log
