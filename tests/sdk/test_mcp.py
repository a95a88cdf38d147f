"""`keel runner --mcp` end to end: an MCP server written with the official Python MCP SDK
(agents/mcp_server.py, stdio) is started by the runner, its tools are published under a
prefix, and a real rebuno==0.4.8 SDK agent calls them through `remote.Tools("mcpt")`.

The server appends every tools/call it receives to a file, so a test can tell which calls
reached it (a call the policy denies must not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import AGENTS, Kernel, Proc, Sandbox, keel_bin, run, unique, wait_until

PREFIX = "mcpt."
SERVER = [sys.executable, str(AGENTS / "mcp_server.py")]

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
default:
  decision: allow
"""


class Setup:
    """A kernel with POLICY, a `keel runner --mcp` serving agents/mcp_server.py, an SDK agent."""

    def __init__(
        self, sandbox: Sandbox, runner_flags: list[str] | None = None, policy_text: str = POLICY
    ):
        self.sandbox = sandbox
        self.dir = sandbox.workdir
        policy = self.dir / "policy.yaml"
        policy.write_text(policy_text)
        self.kernel: Kernel = sandbox.kernel("--policy", str(policy), "--retry-base-delay", "100ms")
        self.calls_file = self.dir / "mcp-calls.jsonl"
        self.description_file = self.dir / "description.txt"
        self.runner = self.start_runner(runner_flags or [])
        # The SDK resolves remote.Tools("mcpt") when it starts: after the runner published.
        self.agent_id = unique("mcp-agent")
        self.agent = sandbox.agent(self.kernel, self.agent_id, unique("mcp-agent-c"))
        self.agent.wait_connected()

    def start_runner(self, flags: list[str]) -> Proc:
        runner_id = unique("mcp-runner")
        argv = [
            str(keel_bin()), "runner", "--mcp",
            "--url", self.kernel.url,
            "--runner-id", runner_id,
            "--tool-prefix", PREFIX,
            "--env-allow", "PATH",
            "--env-allow", "MCP_CALLS_FILE",
            "--env-allow", "MCP_DESCRIPTION_FILE",
            "--kill-grace", "1s",
            *flags,
            "--", *SERVER,
        ]
        env = {
            **os.environ,
            "RUST_LOG": "info",
            "MCP_CALLS_FILE": str(self.calls_file),
            "MCP_DESCRIPTION_FILE": str(self.description_file),
        }
        proc = Proc(runner_id, argv, self.dir / f"{runner_id}.log", env)
        self.sandbox.procs.append(proc)
        proc.wait_for_log("runner connection open", timeout=20)
        return proc

    def run_calls(self, calls: list[dict[str, Any]], parallel: bool = False) -> Any:
        """Runs an execution whose agent makes `calls` (all at once with `parallel`)."""

        async def scenario():
            async with Client(self.kernel.url) as client:
                return await client.run_until_complete(
                    self.agent_id, input={"op": "mcp", "calls": calls, "parallel": parallel}
                )

        return run(scenario(), timeout=30)

    def received(self) -> list[dict[str, Any]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines() if line]


def test_sdk_agent_calls_mcp_tools_and_a_denied_call_never_reaches_the_server(
    sandbox: Sandbox,
) -> None:
    setup = Setup(sandbox)
    public = setup.dir / "public.txt"
    public.write_text("hello from a file")
    secret = setup.dir / "secret.txt"
    secret.write_text("s3cret")

    # The tool directory holds the server's tools under the prefix, with their input schemas.
    directory = httpx.get(setup.kernel.url + "/v0/tools", params={"prefix": "mcpt"}, timeout=5)
    directory.raise_for_status()
    tools = {tool["id"]: tool for tool in directory.json()}
    assert set(tools) == {
        "mcpt.echo", "mcpt.add", "mcpt.read_file", "mcpt.fail", "mcpt.blob", "mcpt.slow",
        "mcpt.stubborn", "mcpt.crash_once", "mcpt.crash_always", "mcpt.pid", "mcpt.changing",
        "mcpt.token_ok", "mcpt.progress", "mcpt.meet",
    }
    add_schema = tools["mcpt.add"]["input_schema"]
    assert add_schema["required"] == ["a", "b"]
    assert add_schema["properties"]["a"]["type"] == "integer"
    assert tools["mcpt.add"]["description"] == "Adds two integers."

    final = setup.run_calls([
        {"tool": "echo", "args": {"text": "hi"}},
        {"tool": "add", "args": {"a": 2, "b": 3}},
        {"tool": "read_file", "args": {"path": str(public)}},
        {"tool": "read_file", "args": {"path": str(secret)}},
        {"tool": "fail", "args": {"reason": "boom"}},
    ])
    assert final.status == ExecutionStatus.COMPLETED, final
    calls = final.output["calls"]
    assert "mcpt.read_file" in final.output["tools"]
    # Structured content is the result as it is (the Python SDK wraps a plain return value
    # as {"result": value}).
    assert calls[0] == {"result": {"result": "hi"}}
    assert calls[1] == {"result": {"sum": 5}}
    assert calls[2] == {"result": {"result": "hello from a file"}}
    # The policy's argument predicate applies to the MCP arguments.
    assert calls[3]["error"] == "PolicyError", calls[3]
    assert "secrets stay put" in calls[3]["message"]
    # isError fails the step with the tool's text.
    assert calls[4]["error"] == "ToolError", calls[4]
    assert "boom" in calls[4]["message"]

    received = [call for call in setup.received() if call["event"] == "call"]
    assert [call["tool"] for call in received] == ["echo", "add", "read_file", "fail"]
    assert all(call["arguments"].get("path") != str(secret) for call in received)

    events = setup.kernel.events(final.id)
    created = [e["payload"]["tool_id"] for e in events if e["type"] == "step.created"]
    assert created == ["mcpt.echo", "mcpt.add", "mcpt.read_file", "mcpt.fail"]
    completed = [e for e in events if e["type"] == "step.completed"]
    assert len(completed) == 3
    failed = [e["payload"] for e in events if e["type"] == "step.failed"]
    assert len(failed) == 1 and failed[0].get("retryable") in (None, False)


def test_a_large_mcp_result_is_cut_with_a_marker(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--max-output", "1KiB"])
    final = setup.run_calls([
        {"tool": "blob", "args": {"size": 5000}},
        {"tool": "blob", "args": {"size": 10}},
    ])
    assert final.status == ExecutionStatus.COMPLETED, final
    big, small = final.output["calls"]
    assert big["result"]["truncated"] is True
    # The size and the preview are of the result's JSON text ({"result":"xxx…"}).
    whole = json.dumps({"result": "x" * 5000}, separators=(",", ":"))
    assert big["result"]["bytes"] == len(whole)
    assert big["result"]["preview"] == whole[:1024]
    assert small == {"result": {"result": "x" * 10}}


def test_the_runner_refuses_to_start_when_the_server_does_not_initialise(sandbox: Sandbox) -> None:
    kernel = sandbox.kernel()
    done = subprocess.run(
        [
            str(keel_bin()), "runner", "--mcp", "--url", kernel.url, "--runner-id", "broken",
            "--", sys.executable, "-c", "import sys; sys.exit(3)",
        ],
        capture_output=True, text=True, timeout=40,
    )
    assert done.returncode != 0, done
    assert "the MCP server did not initialise" in done.stderr, done.stderr
    # Nothing was published under the runner.
    assert httpx.get(kernel.url + "/v0/tools", timeout=5).json() == []


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def start_call(setup: Setup, tool: str, args: dict[str, Any]) -> str:
    body = {"agent_id": setup.agent_id, "input": {"op": "mcp", "calls": [{"tool": tool, "args": args}]}}
    r = httpx.post(setup.kernel.url + "/v0/executions", json=body, timeout=5)
    r.raise_for_status()
    return r.json()["id"]


def wait_received(setup: Setup, tool: str, event: str = "call") -> dict[str, Any]:
    return wait_until(
        f"{tool} {event} at the server",
        lambda: next(
            (c for c in setup.received() if c["tool"] == tool and c["event"] == event), None
        ),
        15,
    )


def cancel(setup: Setup, execution_id: str) -> None:
    r = httpx.post(f"{setup.kernel.url}/v0/executions/{execution_id}/cancel", json={}, timeout=5)
    r.raise_for_status()
    setup.kernel.wait_status(execution_id, "cancelled", timeout=10)


def test_a_cancelled_call_reaches_the_server_as_a_cancellation(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    execution_id = start_call(setup, "slow", {"seconds": 60})
    started = wait_received(setup, "slow")
    cancel(setup, execution_id)
    # The server got notifications/cancelled and stopped the tool.
    stopped = wait_received(setup, "slow", "cancelled")
    assert stopped["pid"] == started["pid"]
    # It answered the ping after the grace, so it keeps running and serves the next call.
    setup.runner.wait_for_log("MCP call cancelled")
    final = setup.run_calls([{"tool": "pid", "args": {}}])
    assert final.output["calls"] == [{"result": {"result": started["pid"]}}]
    assert "did not answer a ping" not in setup.runner.log.read_text()


def test_a_server_stuck_in_a_cancelled_call_is_killed_and_started_again(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    execution_id = start_call(setup, "stubborn", {"seconds": 300})
    started = wait_received(setup, "stubborn")
    cancel(setup, execution_id)
    # No answer to the ping within the grace (1s): the process group is killed.
    setup.runner.wait_for_log("did not answer a ping after a cancelled call", timeout=15)
    wait_until("the stuck server to be gone", lambda: not alive(started["pid"]), 10)
    # The next call starts a new server.
    final = setup.run_calls([{"tool": "pid", "args": {}}])
    [call] = final.output["calls"]
    new_pid = call["result"]["result"]
    assert new_pid != started["pid"] and alive(new_pid)


def test_a_crashed_server_fails_the_call_retryably_and_is_started_again(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    marker = setup.dir / "crashed-once"
    final = setup.run_calls([{"tool": "crash_once", "args": {"marker": str(marker)}}])
    assert final.status == ExecutionStatus.COMPLETED, final
    # The kernel ran the step again on the restarted server.
    assert final.output["calls"] == [{"result": {"result": "survived"}}]
    crashes = [c for c in setup.received() if c["tool"] == "crash_once"]
    assert len(crashes) == 2 and crashes[0]["pid"] != crashes[1]["pid"]
    assert not alive(crashes[0]["pid"])
    events = setup.kernel.events(final.id)
    failed = [e["payload"] for e in events if e["type"] == "step.failed"]
    assert failed and failed[0]["retryable"] is True, failed
    assert "went away" in failed[0]["error"]


def test_stopping_the_runner_leaves_no_server_process(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    final = setup.run_calls([{"tool": "pid", "args": {}}])
    server_pid = final.output["calls"][0]["result"]["result"]
    assert alive(server_pid)
    setup.runner.stop(grace=10)
    assert not alive(server_pid)


def published(setup: Setup, runner: Proc) -> dict[str, dict[str, Any]]:
    tools = httpx.get(setup.kernel.url + "/v0/tools", params={"prefix": "mcpt"}, timeout=5).json()
    return {tool["id"]: tool for tool in tools if tool.get("runner_id") == runner.name}


def test_a_changed_definition_is_withdrawn_until_accepted(sandbox: Sandbox) -> None:
    pins = sandbox.workdir / "pins.json"
    setup = Setup(sandbox, ["--pin-file", str(pins)])
    first = setup.runner
    assert published(setup, first)["mcpt.changing"]["description"] == "Version one."
    pinned = json.loads(pins.read_text())["tools"]
    assert pinned["changing"].startswith("sha256:")
    final = setup.run_calls([{"tool": "changing", "args": {}}])
    assert final.output["calls"] == [{"result": {"result": "changed nothing"}}]

    # The server changes the definition under the runner (a "rug pull") and restarts.
    setup.description_file.write_text("Version two: also uploads your files.")
    marker = setup.dir / "crashed-once"
    final = setup.run_calls([{"tool": "crash_once", "args": {"marker": str(marker)}}])
    assert final.output["calls"] == [{"result": {"result": "survived"}}]
    first.wait_for_log("MCP tool withdrawn", timeout=10)
    wait_until(
        "mcpt.changing to leave the tool directory",
        lambda: "mcpt.changing" not in published(setup, first),
        10,
    )
    assert "mcpt.echo" in published(setup, first)
    # The SDK's remote.Tools no longer offers it (it lists tools per execution); a call by id
    # is not dispatched to the runner (its capabilities follow what it publishes): it waits.
    before = len(setup.received())
    body = {"agent_id": setup.agent_id, "input": {"op": "call", "tool": "mcpt.changing"}}
    r = httpx.post(setup.kernel.url + "/v0/executions", json=body, timeout=5)
    r.raise_for_status()
    execution_id = r.json()["id"]
    setup.kernel.wait_event(execution_id, "step.created")
    assert json.loads(pins.read_text())["tools"] == pinned

    # A new runner with the same pin file still withdraws it ...
    first.stop(grace=10)
    second = setup.start_runner(["--pin-file", str(pins)])
    second.wait_for_log("MCP tool withdrawn", timeout=10)
    assert "mcpt.changing" not in published(setup, second)
    assert "mcpt.echo" in published(setup, second)
    second.stop(grace=10)
    kinds = setup.kernel.event_types(execution_id)
    assert not {"step.started", "step.completed", "step.failed"} & set(kinds), kinds
    assert [c for c in setup.received()[before:] if c["tool"] == "changing"] == []
    # ... until an operator accepts the change: then the waiting call runs.
    third = setup.start_runner(["--pin-file", str(pins), "--accept-tool-changes"])
    tool = published(setup, third)["mcpt.changing"]
    assert tool["description"] == "Version two: also uploads your files."
    assert json.loads(pins.read_text())["tools"]["changing"] != pinned["changing"]
    final = setup.kernel.wait_status(execution_id, "completed", "failed", timeout=20)
    assert final["status"] == "completed", final
    assert final["output"]["result"] == {"result": "changed nothing"}
    assert [c["tool"] for c in setup.received()[before:]] == ["changing"]


def test_a_secret_from_a_file_reaches_the_server_and_nothing_else(sandbox: Sandbox) -> None:
    import hashlib

    secret = "tok-" + unique("s3cret")
    token_file = sandbox.workdir / "token"
    token_file.write_text(secret + "\n")
    setup = Setup(sandbox, ["--env-file", f"MCP_TOKEN={token_file}"])
    digest = hashlib.sha256(secret.encode()).hexdigest()
    final = setup.run_calls([{"tool": "token_ok", "args": {"expected_sha256": digest}}])
    assert final.output["calls"] == [{"result": {"result": True}}]
    events = json.dumps(setup.kernel.events(final.id))
    tools = httpx.get(setup.kernel.url + "/v0/tools", timeout=5).text
    for text in (events, tools, setup.runner.log.read_text(), setup.kernel.log.read_text()):
        assert secret not in text
