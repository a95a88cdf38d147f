"""Keel as an MCP server: `/v0/executions/{id}/mcp` (Streamable HTTP).

A rebuno==0.4.8 agent holds an execution; inside its handler an MCP client of the official
Python SDK (`mcp` on PyPI) reaches the kernel's tools through that execution, proving its hold
with the Keel-Session header. The tools are those `keel runner --mcp` publishes for
agents/mcp_server.py (test_mcp.py's Setup), so the test can tell which calls reached a server.
"""

from __future__ import annotations

import httpx

from harness import Sandbox, wait_until
from test_mcp import Setup

POLICY = """\
rules:
  - id: no-secrets
    priority: 1
    when:
      tool_id: mcpt.read_file
      arguments:
        - field: path
          pattern: '^.*secret.*$'
    then:
      decision: deny
      reason: "secrets stay put"
  - id: no-blobs
    priority: 2
    when:
      tool_id: mcpt.blob
    then:
      decision: deny
      reason: "blobs are not for this agent"
  - id: approve-add
    priority: 3
    when:
      tool_id: mcpt.add
    then:
      decision: require_approval
      reason: "sums need a human"
default:
  decision: allow
"""


def start(setup: Setup, calls: list[dict], parallel: bool = False) -> str:
    """Starts an execution whose MCP client makes `calls` (all at once with `parallel`)."""
    inp = {"op": "mcp_client", "calls": calls, "parallel": parallel}
    body = {"agent_id": setup.agent_id, "input": inp}
    r = httpx.post(setup.kernel.url + "/v0/executions", json=body, timeout=5)
    r.raise_for_status()
    return r.json()["id"]


def test_an_mcp_client_lists_allowed_tools_and_calls_them_as_steps(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, policy_text=POLICY)
    public = setup.dir / "public.txt"
    public.write_text("hello from a file")
    secret = setup.dir / "secret.txt"
    secret.write_text("s3cret")
    eid = start(setup, [
        {"tool": "mcpt.echo", "args": {"text": "hi"}},
        {"tool": "mcpt.read_file", "args": {"path": str(public)}},
        {"tool": "mcpt.read_file", "args": {"path": str(secret)}},
        {"tool": "mcpt.add", "args": {"a": 2, "b": 3}},
        {"tool": "mcpt.fail", "args": {"reason": "boom"}},
    ])

    # The call needing approval blocks the client until a human answers; then it proceeds.
    block = wait_until(
        "the approval request",
        lambda: next(
            (e for e in setup.kernel.events(eid) if e["type"] == "step.approval_required"),
            None,
        ),
        20,
    )
    assert block["payload"]["tool_id"] == "mcpt.add"
    assert not any(c["tool"] == "add" for c in setup.received())
    answer = httpx.post(
        f"{setup.kernel.url}/v0/executions/{eid}/signal",
        json={
            "signal_type": "step.approve",
            "payload": {"step_id": block["step_id"], "approved": True},
        },
        timeout=5,
    )
    answer.raise_for_status()

    final = setup.kernel.wait_status(eid, "completed", timeout=30)
    output = final["output"]
    # tools/list: the directory less what the policy denies outright (mcpt.blob); a tool the
    # policy denies only for some arguments is listed, with the runner's schema.
    assert "mcpt.blob" not in output["tools"], output["tools"]
    assert {"mcpt.echo", "mcpt.read_file", "mcpt.add", "mcpt.fail"} <= set(output["tools"])
    assert output["schemas"]["mcpt.add"]["required"] == ["a", "b"]

    echo, public_read, secret_read, add, fail = output["calls"]
    assert echo == {"is_error": False, "text": ['{"result":"hi"}'], "structured": {"result": "hi"}}
    assert public_read["structured"] == {"result": "hello from a file"}
    # A denied call is an MCP error result with the policy's reason, and never reaches the server.
    assert secret_read["is_error"] is True
    assert "secrets stay put" in secret_read["text"][0], secret_read
    assert add == {"is_error": False, "text": ['{"sum":5}'], "structured": {"sum": 5}}
    # The tool's own failure comes back as an error result with its text.
    assert fail["is_error"] is True and "boom" in fail["text"][0], fail

    received = [c for c in setup.received() if c["event"] == "call"]
    assert [c["tool"] for c in received] == ["echo", "read_file", "add", "fail"]
    assert all(c["arguments"].get("path") != str(secret) for c in received)

    # Every allowed call is a step of the execution's log.
    events = setup.kernel.events(eid)
    created = [e["payload"]["tool_id"] for e in events if e["type"] == "step.created"]
    assert created == ["mcpt.echo", "mcpt.read_file", "mcpt.add", "mcpt.fail"]
    assert len([e for e in events if e["type"] == "step.completed"]) == 3


def test_the_endpoint_refuses_a_caller_that_does_not_hold_the_execution(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, policy_text=POLICY)
    eid = start(setup, [])
    setup.kernel.wait_status(eid, "completed", timeout=30)
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    # A finished execution: its tools are no longer reachable (409, JSON error).
    r = httpx.post(f"{setup.kernel.url}/v0/executions/{eid}/mcp", json=initialize,
                   headers={**headers, "Keel-Session": "whatever"}, timeout=5)
    assert r.status_code == 409, r.text
    assert r.json()["code"] == "CONFLICT"
    # An unknown execution: 404.
    r = httpx.post(f"{setup.kernel.url}/v0/executions/nope/mcp", json=initialize,
                   headers=headers, timeout=5)
    assert r.status_code == 404, r.text
    assert r.json()["code"] == "NOT_FOUND"

    # A running execution, held by the agent: a wrong session and no session are refused
    # (403, JSON error) and nothing reaches the kernel's tools.
    held = httpx.post(setup.kernel.url + "/v0/executions",
                      json={"agent_id": setup.agent_id, "input": {"op": "hold"}}, timeout=5)
    held.raise_for_status()
    hid = held.json()["id"]
    setup.kernel.wait_status(hid, "running", "blocked", timeout=10)
    for extra in ({"Keel-Session": "not-the-session"}, {}):
        r = httpx.post(f"{setup.kernel.url}/v0/executions/{hid}/mcp", json=initialize,
                       headers={**headers, **extra}, timeout=5)
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "FORBIDDEN"
        assert "does not" in r.json()["error"], r.text
    assert setup.received() == []
