"""The LLM gateway with the official `anthropic` package, unmodified: a rebuno 0.4.8 agent's
handler sends a whole and a streamed message through the kernel (base URL naming its execution,
its session in `Keel-Session`); the kernel forwards both to a scripted Anthropic-format provider
on loopback with the provider's key as `x-api-key`, records each call with its usage, and
refuses a caller that does not hold the execution with the error the client raises."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic
import pytest

from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import Sandbox, run, unique

KEY = "sk-ant-py-provider-key-8841"


def message(model: str, text: str, usage: dict) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}] if text else [],
            "stop_reason": "end_turn" if text else None, "stop_sequence": None, "usage": usage}


class FakeAnthropic(BaseHTTPRequestHandler):
    seen: list[tuple[str | None, str | None, dict]] = []

    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        FakeAnthropic.seen.append(
            (self.headers.get("x-api-key"), self.headers.get("anthropic-version"), body))
        if self.path != "/v1/messages":
            self.send_error(404)
            return
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            events = [
                ("message_start", {"type": "message_start",
                                   "message": message(body["model"], "", {"input_tokens": 4, "output_tokens": 1})}),
                ("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}}),
                *[("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": piece}})
                  for piece in ["Hel", "lo"]],
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                   "usage": {"output_tokens": 3}}),
                ("message_stop", {"type": "message_stop"}),
            ]
            for name, data in events:
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            return
        data = json.dumps(message(body["model"], "Hello", {"input_tokens": 5, "output_tokens": 2})).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def provider():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAnthropic)
    FakeAnthropic.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_anthropic_client_through_the_gateway(sandbox: Sandbox, provider: str, tmp_path: Path) -> None:
    (tmp_path / "anthropic.key").write_text(KEY + "\n")
    config = tmp_path / "llm.yaml"
    config.write_text(
        f"providers:\n  claude:\n    format: anthropic\n    base_url: {provider}\n"
        "    api_key_file: anthropic.key\n"
        "    prices:\n      claude-test: {input: 3.0, output: 15.0}\n"
    )
    kernel = sandbox.kernel("--llm-config", str(config))
    agent_id = unique("ant")
    sandbox.agent(kernel, agent_id, unique("ant-c"))

    async def scenario():
        async with Client(kernel.url) as client:
            final = await client.run_until_complete(
                agent_id, input={"op": "anthropic", "provider": "claude", "model": "claude-test"})
            return final, await client.events_snapshot(final.id)

    final, events = run(scenario(), timeout=20)
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["plain"] == "Hello" and final.output["streamed"] == "Hello"
    # The provider got its own key (never the caller's) and the client's anthropic-version.
    assert [key for key, _, _ in FakeAnthropic.seen] == [KEY] * 2
    versions = {version for _, version, _ in FakeAnthropic.seen}
    assert len(versions) == 1 and None not in versions, versions
    assert FakeAnthropic.seen[1][2]["stream"] is True

    calls = [event.payload for event in events if event.type == "llm.called"]
    assert [(c["provider"], c["stream"], c["outcome"], c["input_tokens"], c["output_tokens"])
            for c in calls] == [("claude", False, "ok", 5, 2), ("claude", True, "ok", 4, 3)]
    assert calls[0]["cost"] == {"tokens": 7.0, "usd": pytest.approx((5 * 3.0 + 2 * 15.0) / 1e6)}

    # Without the execution's session the caller is refused in Anthropic's error shape.
    async def create_waiting():
        async with Client(kernel.url) as client:
            return await client.create(unique("ant-nobody"), input={})

    waiting = run(create_waiting())
    outsider = anthropic.Anthropic(
        base_url=f"{kernel.url}/v0/executions/{waiting.id}/llm/claude",
        api_key="x", max_retries=0, timeout=10,
    )
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        outsider.messages.create(model="claude-test", max_tokens=8,
                                 messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["code"] == "not_execution_holder"
    assert len(FakeAnthropic.seen) == 2
    assert KEY not in kernel.proc.log_text()
    assert KEY not in json.dumps([event.payload for event in events])
