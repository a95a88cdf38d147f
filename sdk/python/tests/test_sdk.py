"""keel_sdk against the real kernel (installed from its wheel): hook modifications of local
tools are applied, errors are typed and keep the kernel's reason, a 401 stops an agent, and a
replayed local call is not run again (fake kernel until the kernel answers `replay`)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import keel_sdk
from keel_sdk import Agent, Client, PolicyDenied, Unauthorized, ToolError

POLICY = """rules:
  - id: no-rm
    priority: 1
    when:
      tool_id: danger.rm
    then:
      decision: deny
      reason: rm is never allowed
  - id: ask
    priority: 2
    when:
      tool_id: guarded.echo
    then:
      decision: require_approval
default:
  decision: allow
"""


class Guard(BaseHTTPRequestHandler):
    """pre_tool: moves /etc paths into a sandbox; post_tool: redacts tokens."""

    def do_POST(self) -> None:  # noqa: N802
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer: dict[str, Any] = {"decision": "pass"}
        if call["point"] == "pre_tool" and str(call["arguments"].get("path", "")).startswith("/etc"):
            answer = {"decision": "modify", "arguments": {"path": "/sandbox" + call["arguments"]["path"]}}
        elif call["point"] == "post_tool" and "token" in (call.get("result") or {}):
            answer = {"decision": "modify", "result": {**call["result"], "token": "[redacted]"}}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def run(coro: Any, timeout: float = 30.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def markers(path: Path, event: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [m for m in lines if m["event"] == event]


def test_installed_from_the_wheel() -> None:
    assert "site" in Path(keel_sdk.__file__).parts, keel_sdk.__file__
    assert (Path(keel_sdk.__file__).parent / "py.typed").exists()


def test_hook_modifications_of_local_tools_are_applied(tmp_path: Path, start_kernel, agent_proc) -> None:  # type: ignore[no-untyped-def]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Guard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        policy = tmp_path / "policy.yaml"
        policy.write_text(
            POLICY + "hooks:\n"
            f"  - id: sandbox\n    point: pre_tool\n    url: {url}/pre\n    timeout: 2s\n"
            f"  - id: redact\n    point: post_tool\n    url: {url}/post\n    timeout: 2s\n"
        )
        kernel = start_kernel("--policy", str(policy))
        marks = agent_proc(kernel, "reader")

        async def scenario() -> Any:
            async with Client(kernel.url) as client:
                done = await client.run_until_complete("reader", {"op": "read", "path": "/etc/passwd"})
                return done, await client.events(done.id)

        done, events = run(scenario())
    finally:
        server.shutdown()
    assert done.status == "completed", done.raw
    # The tool ran with the hook's arguments, and the agent got the hook's result.
    assert [m["path"] for m in markers(marks, "fs-read-ran")] == ["/sandbox/etc/passwd"]
    assert done.output["read"] == {"path": "/sandbox/etc/passwd", "token": "[redacted]"}
    created = next(e for e in events if e["type"] == "step.created")
    assert created["payload"]["arguments"] == {"path": "/sandbox/etc/passwd"}
    assert "secret-" not in json.dumps(events)


def test_denials_are_typed_and_keep_the_kernels_reason(tmp_path: Path, start_kernel, agent_proc) -> None:  # type: ignore[no-untyped-def]
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    kernel = start_kernel("--policy", str(policy))
    marks = agent_proc(kernel, "typed")

    async def scenario() -> Any:
        async with Client(kernel.url) as client:
            denied = await client.run_until_complete("typed", {"op": "deny"})
            asked = await client.create("typed", {"op": "approval"})
            approval_id = ""
            for _ in range(200):
                listed = (await client._http.get("/v0/approvals")).json()
                pending = [a for a in listed.get("approvals", []) if a["execution_id"] == asked.id]
                if pending:
                    approval_id = pending[0]["id"]
                    break
                await asyncio.sleep(0.05)
            assert approval_id, "the call waits for an approval"
            answer = {"decision": "deny", "reason": "not on a Friday"}
            response = await client._http.post(f"/v0/approvals/{approval_id}", json=answer)
            assert response.status_code == 200, response.text
            return denied, await client.wait(asked.id)

    denied, asked = run(scenario())
    assert denied.output == {
        "type": "PolicyDenied", "reason": "rm is never allowed", "rule_id": "no-rm"
    }, denied.output
    assert asked.output["type"] == "ApprovalDenied", asked.output
    assert asked.output["reason"] == "not on a Friday"
    assert markers(marks, "danger-ran") == [] and markers(marks, "guarded-ran") == []


def test_a_runner_serves_remote_tools_with_a_stable_idempotency_key(start_kernel, agent_proc) -> None:  # type: ignore[no-untyped-def]
    kernel = start_kernel()
    ran = agent_proc(kernel, "calc-runner", "runner_app.py")
    agent_proc(kernel, "remote-user")

    async def scenario() -> Any:
        async with Client(kernel.url) as client:
            for _ in range(200):  # the runner is connected once its tool is listed
                tools = await client.request("GET", "/v0/tools")
                if any(t.get("id") == "calc.mul" for t in tools or []):
                    break
                await asyncio.sleep(0.05)
            return await client.run_until_complete("remote-user", {"op": "remote"})

    done = run(scenario())
    assert done.status == "completed", done.raw
    assert done.output["product"] == 42
    keys = [m["key"] for m in markers(ran, "mul-ran")]
    assert len(keys) == 1 and keys[0], keys


def test_a_re_run_replays_local_calls_instead_of_running_them_again(start_kernel, agent_proc) -> None:  # type: ignore[no-untyped-def]
    kernel = start_kernel()
    first = agent_proc(kernel, "journey", name="journey-1")

    async def until(check: Any, what: str) -> Any:
        for _ in range(400):
            found = check()
            if found:
                return found
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    async def scenario() -> Any:
        async with Client(kernel.url) as client:
            created = await client.create("journey", {"op": "journey"})
            # The first local call ran and the agent waits for the signal: kill it there.
            await until(lambda: markers(first, "fs-read-ran"), "the first call")
            await until(
                lambda: any(e["type"] == "execution.blocked" for e in events_now(kernel.url, created.id)),
                "the wait",
            )
            agent_proc.procs[0].kill()
            agent_proc.procs[0].wait(10)
            # A signal wait keeps its session; the signal finds the holder gone, so the
            # execution is re-run on the second agent.
            second = agent_proc(kernel, "journey", name="journey-2")
            await client.send_signal(created.id, "go", {"by": "ana"})
            await until(lambda: markers(second, "start"), "the re-run on the second agent")
            return second, await client.wait(created.id), await client.events(created.id)

    second, done, events = run(scenario(), timeout=60)
    assert done.status == "completed", done.raw
    # Each local tool body ran once in all: /a on the first agent only, /b on the second.
    assert [m["path"] for m in markers(first, "fs-read-ran")] == ["/a"]
    assert [m["path"] for m in markers(second, "fs-read-ran")] == ["/b"]
    assert done.output["first"] == {"path": "/a", "token": "secret-/a"}
    assert done.output["go"] == {"by": "ana"}
    replayed = [e for e in events if e["type"] == "step.created" and e["payload"].get("replay_of")]
    assert len(replayed) == 1 and replayed[0]["payload"]["tool_id"] == "fs.read", replayed


def events_now(url: str, execution_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/v0/executions/{execution_id}/events", params={"limit": 1000})
    return list(answer.json().get("events", []))


def test_a_refused_credential_stops_the_agent(start_kernel) -> None:  # type: ignore[no-untyped-def]
    kernel = start_kernel("--bearer-token", "right-token-0123456789")
    agent = Agent("locked", base_url=kernel.url, api_key="wrong", reconnect_delay=0.1)
    with pytest.raises(Unauthorized) as raised:
        run(agent.run_async(lambda payload: payload), timeout=10)
    assert raised.value.status_code == 401
    runner = keel_sdk.Runner("locked-runner", tools=[], base_url=kernel.url, api_key="wrong")
    with pytest.raises(Unauthorized):
        run(runner.run_async(), timeout=10)

    async def create() -> None:
        async with Client(kernel.url, api_key="wrong") as client:
            await client.create("locked", {})

    with pytest.raises(Unauthorized):
        run(create())


def fake_kernel(replay: dict[str, Any]) -> tuple[httpx.MockTransport, list[str]]:
    """Answers an invoke_tool with `replay`; records the paths it was asked for."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        assert request.headers["Keel-Capabilities"] == "modify, replay"
        if request.url.path == "/v0/agents/intent":
            return httpx.Response(200, json={"accepted": True, "step_id": "s2", "replay": replay})
        return httpx.Response(200, json={"status": "ok"})

    return httpx.MockTransport(answer), seen


def test_a_replayed_local_call_returns_the_recorded_outcome_without_running() -> None:
    from keel_sdk.execution import ExecutionState

    ran: list[str] = []

    def body(path: str) -> str:
        ran.append(path)
        return "live"

    async def call(replay: dict[str, Any]) -> tuple[Any, list[str]]:
        transport, seen = fake_kernel(replay)
        async with Client("http://kernel", transport=transport) as client:
            state = ExecutionState(client, {"execution_id": "e", "session_id": "s"})
            return await state.invoke_tool("fs.read", {"path": "/a"}, local=body), seen

    recorded = {"of_step_id": "s1", "status": "succeeded", "result": "recorded", "error": None}
    result, seen = run(call(recorded))
    assert result == "recorded"
    assert ran == []
    assert seen == ["/v0/agents/intent"], "no step result is posted for a replay"
    failed = {"of_step_id": "s1", "status": "failed", "result": None, "error": "disk full"}
    with pytest.raises(ToolError, match="disk full"):
        run(call(failed))
    assert ran == []
