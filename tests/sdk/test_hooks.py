"""A post_tool hook (docs/hooks.md) rewrites a remote tool's result; the unmodified SDK agent
receives the rewritten value and the log records the hook's decision before the result."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import Sandbox, run, unique


class _Hook(BaseHTTPRequestHandler):
    calls: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Hook.calls.append(call)
        answer = {"decision": "modify", "result": call["result"] - 1}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


def test_a_post_tool_hook_modifies_the_result_the_agent_sees(sandbox: Sandbox) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        policy = sandbox.workdir / "hooks-policy.yaml"
        policy.write_text(
            "rules:\n"
            "  - id: mul\n    priority: 1\n    when:\n      tool_id: calc_mul\n"
            "    then:\n      decision: allow\n"
            "default:\n  decision: allow\n"
            "hooks:\n"
            f"  - id: off-by-one\n    point: post_tool\n"
            f"    url: http://127.0.0.1:{server.server_address[1]}/post\n"
            "    timeout: 2s\n    rule_ids: [mul]\n"
        )
        kernel = sandbox.kernel("--policy", str(policy))
        runner = sandbox.runner(kernel, unique("hook-runner"), unique("hook-runner-c"))
        runner.wait_connected("runners")
        agent_id = unique("hooked")
        sandbox.agent(kernel, agent_id, unique("hooked-c"))
        token = uuid.uuid4().hex

        async def scenario():
            async with Client(kernel.url) as client:
                final = await client.run_until_complete(
                    agent_id, input={"op": "remote", "a": 6, "b": 7, "token": token}
                )
                return final, await client.events_snapshot(final.id, limit=1000)

        final, events = run(scenario(), timeout=20)
    finally:
        server.shutdown()

    assert final.status == ExecutionStatus.COMPLETED, final
    # calc_mul returned 42; the hook made it 41, and that is what the agent got.
    assert final.output["product"] == 41
    assert final.output["flaky"] == {"token": token, "ok": True}  # other tools untouched
    assert [call["tool_id"] for call in _Hook.calls] == ["calc_mul"]
    assert _Hook.calls[0]["result"] == 42
    decided = [e for e in events if e.type == "hook.decided"]
    assert len(decided) == 1
    assert decided[0].payload["decision"] == "modify"
    assert decided[0].payload["hook_id"] == "off-by-one"
    types = [e.type for e in events]
    completed = next(e for e in events if e.type == "step.completed" and e.payload.get("result") == 41)
    assert types.index("hook.decided") < events.index(completed)
