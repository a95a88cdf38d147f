"""Hooks (docs/hooks.md) seen through the unmodified SDK: a post_tool hook rewrites a remote
tool's result, which the agent receives, and the log records the hook's decision before the
result; a pre_create hook refuses a Client's create (PolicyError) or adds labels to it."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rebuno import Client, PolicyError
from rebuno.types import ExecutionStatus

from harness import Sandbox, run, unique


class _JsonHook(BaseHTTPRequestHandler):
    """A hook endpoint: records each call in the subclass's `calls`, answers `answer(call)`."""

    calls: list[dict]

    def answer(self, call: dict) -> dict:
        raise NotImplementedError

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(call)
        body = json.dumps(self.answer(call)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


class _Hook(_JsonHook):
    """A post_tool hook: takes one off every result."""

    calls: list[dict] = []

    def answer(self, call: dict) -> dict:
        return {"decision": "modify", "result": call["result"] - 1}


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


class _Guard(_JsonHook):
    """A pre_tool hook that moves paths under /etc into a sandbox, and a post_tool hook that
    redacts tokens."""

    calls: list[dict] = []

    def answer(self, call: dict) -> dict:
        if call["point"] == "pre_tool" and call["arguments"]["path"].startswith("/etc"):
            return {"decision": "modify", "arguments": {"path": "/sandbox" + call["arguments"]["path"]}}
        if call["point"] == "post_tool" and "token" in call["result"]:
            return {"decision": "modify", "result": {**call["result"], "token": "[redacted]"}}
        return {"decision": "pass"}


def test_a_hook_modify_of_a_local_tool_is_refused_for_the_rebuno_sdk(sandbox: Sandbox) -> None:
    """The rebuno SDK runs local tools itself and cannot apply a hook's modification: the call
    is refused with the reason instead of running with arguments the log does not show, and a
    redacted result is not handed to the agent as if it were the original."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Guard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        policy = sandbox.workdir / "guard-policy.yaml"
        policy.write_text(
            "rules: []\n"
            "default:\n  decision: allow\n"
            "hooks:\n"
            f"  - id: sandbox\n    point: pre_tool\n    url: {url}/pre\n    timeout: 2s\n"
            f"  - id: redact\n    point: post_tool\n    url: {url}/post\n    timeout: 2s\n"
        )
        kernel = sandbox.kernel("--policy", str(policy))
        agent_id = unique("guarded")
        agent = sandbox.agent(kernel, agent_id, unique("guarded-c"))

        async def scenario():
            async with Client(kernel.url) as client:
                moved = await client.run_until_complete(agent_id, input={"op": "hooked", "path": "/etc/passwd"})
                redacted = await client.run_until_complete(agent_id, input={"op": "hooked", "path": "/tmp/a"})
                return moved, redacted

        moved, redacted = run(scenario(), timeout=20)
    finally:
        server.shutdown()

    # pre_tool: refused with the hook's reason; the tool never ran with either path.
    assert moved.status == ExecutionStatus.COMPLETED, moved
    assert "changed the arguments of local tool fs.read" in moved.output["denied"]
    assert "Keel-Capabilities: modify" in moved.output["denied"]
    ran = [m["path"] for m in agent.markers("fs-read-ran")]
    assert "/etc/passwd" not in ran and "/sandbox/etc/passwd" not in ran, ran
    denied = [e for e in kernel.events(moved.id) if e["type"] == "intent.denied"]
    assert denied[0]["payload"]["rule_id"] == "hook:sandbox"
    assert denied[0]["payload"]["arguments"] == {"path": "/etc/passwd"}

    # post_tool: the tool ran, the agent's result report was refused (PolicyError), and the
    # step failed with the reason: the log holds no result the agent did not get.
    assert redacted.status == ExecutionStatus.COMPLETED, redacted
    assert ran == ["/tmp/a"]
    assert redacted.output["rule_id"] == "hook:redact"
    assert "changed the result of local tool fs.read" in redacted.output["denied"]
    events = kernel.events(redacted.id)
    assert [e["type"] for e in events].count("step.failed") == 1
    assert "secret-" not in json.dumps(events)


class _Admit(_JsonHook):
    """A pre_create hook: refuses creations whose input asks for it, adds a label otherwise."""

    calls: list[dict] = []

    def answer(self, call: dict) -> dict:
        if (call.get("input") or {}).get("refuse"):
            return {"decision": "abort", "reason": "tenant over quota"}
        return {"decision": "modify", "labels": {"tenant": "acme"}}


def test_a_pre_create_hook_refuses_a_client_create_or_adds_labels(sandbox: Sandbox) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Admit)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        policy = sandbox.workdir / "admit-policy.yaml"
        policy.write_text(
            "rules: []\n"
            "default:\n  decision: allow\n"
            "hooks:\n"
            f"  - id: admit\n    point: pre_create\n"
            f"    url: http://127.0.0.1:{server.server_address[1]}/create\n"
            "    timeout: 2s\n"
        )
        kernel = sandbox.kernel("--policy", str(policy))
        agent_id = unique("admitted")
        sandbox.agent(kernel, agent_id, unique("admitted-c"))

        async def scenario():
            async with Client(kernel.url) as client:
                try:
                    await client.create(agent_id, input={"op": "labels", "refuse": True})
                    refused = None
                except PolicyError as error:
                    refused = error
                listed_after_refusal = await client.list(agent_id=agent_id)
                created = await client.create(
                    agent_id, input={"op": "labels"}, labels={"team": "ops"}
                )
                by_label = await client.list(labels={"tenant": "acme"}, agent_id=agent_id)
                final = await client.run_until_complete(agent_id, input={"op": "labels"})
                events = await client.events_snapshot(created.id, limit=1000)
                return refused, listed_after_refusal, created, by_label, final, events

        refused, listed_after_refusal, created, by_label, final, events = run(
            scenario(), timeout=20
        )
    finally:
        server.shutdown()

    # The refusal reaches the unmodified Client as PolicyError (a 403) naming the hook.
    assert isinstance(refused, PolicyError), refused
    assert "tenant over quota" in str(refused)
    assert refused.rule_id == "hook:admit"
    assert refused.status_code == 403
    assert listed_after_refusal.executions == []
    # Labels the hook added sit beside the client's, and the list filter finds them.
    assert created.labels == {"team": "ops", "tenant": "acme"}
    assert [e.id for e in by_label.executions] == [created.id]
    assert [e.type for e in events][:2] == ["execution.created", "hook.decided"]
    assert events[1].payload["labels"] == {"tenant": "acme"}
    # An SDK agent sees the added label on its execution.
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["labels"] == {"tenant": "acme"}
    assert [call["agent_id"] for call in _Admit.calls] == [agent_id] * 3
    assert "execution_id" not in _Admit.calls[0]
