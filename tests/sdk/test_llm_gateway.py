"""The LLM gateway with the official `openai` package: a rebuno 0.4.8 agent's handler calls a
model through the kernel (base URL naming its execution, its session in `Keel-Session`); the
kernel forwards plain and streamed chat completions to a scripted provider on loopback with the
provider's key, records each call as `llm.called` (which the rebuno SDK parses), and refuses a
caller that does not hold the execution."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai
import pytest

from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import Sandbox, run, unique

KEY = "sk-py-provider-key-3107"


class FakeProvider(BaseHTTPRequestHandler):
    seen: list[tuple[str | None, dict]] = []

    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        FakeProvider.seen.append((self.headers.get("authorization"), body))
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for piece in ["Hel", "lo"]:
                chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1,
                         "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"id": "c1", "object": "chat.completion.chunk", "created": 1,
                         "model": body["model"], "choices": [],
                         "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}
                self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        answer = {"id": "c1", "object": "chat.completion", "created": 1, "model": body["model"],
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Hello"}}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def provider():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeProvider)
    FakeProvider.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_client_through_the_gateway(sandbox: Sandbox, provider: str, tmp_path: Path) -> None:
    (tmp_path / "openai.key").write_text(KEY + "\n")
    config = tmp_path / "llm.yaml"
    config.write_text(
        f"providers:\n  openai:\n    format: openai\n    base_url: {provider}\n"
        "    api_key_file: openai.key\n"
        "    prices:\n      gpt-test: {input: 1.0, output: 2.0}\n"
    )
    kernel = sandbox.kernel("--llm-config", str(config))
    agent_id = unique("llm")
    sandbox.agent(kernel, agent_id, unique("llm-c"))

    async def scenario():
        async with Client(kernel.url) as client:
            final = await client.run_until_complete(agent_id, input={"op": "llm", "model": "gpt-test"})
            return final, await client.events_snapshot(final.id)

    final, events = run(scenario(), timeout=20)
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["plain"] == "Hello" and final.output["streamed"] == "Hello"
    assert [auth for auth, _ in FakeProvider.seen] == [f"Bearer {KEY}"] * 2
    assert FakeProvider.seen[1][1]["stream"] is True

    # The rebuno SDK parsed the log, llm.called included; usage and cost are recorded.
    calls = [event.payload for event in events if event.type == "llm.called"]
    assert [(c["stream"], c["outcome"], c["input_tokens"], c["output_tokens"]) for c in calls] == [
        (False, "ok", 5, 1), (True, "ok", 4, 2)]
    assert calls[0]["cost"] == {"tokens": 6.0, "usd": pytest.approx((5 * 1.0 + 1 * 2.0) / 1e6)}

    # Without the execution's session the caller is refused, in OpenAI's error shape (an
    # execution still waiting for an agent: nobody holds it).
    async def create_waiting():
        async with Client(kernel.url) as client:
            return await client.create(unique("llm-nobody"), input={})

    waiting = run(create_waiting())
    outsider = openai.OpenAI(
        base_url=f"{kernel.url}/v0/executions/{waiting.id}/llm/openai/v1",
        api_key="x", max_retries=0, timeout=10,
    )
    with pytest.raises(openai.PermissionDeniedError):
        outsider.chat.completions.create(model="gpt-test", messages=[])
    # Another execution id that does not exist: the client raises its usual error.
    missing = openai.OpenAI(
        base_url=f"{kernel.url}/v0/executions/0196f1c2-0000-7000-8000-000000000000/llm/openai/v1",
        api_key="x", max_retries=0, timeout=10,
    )
    with pytest.raises(openai.NotFoundError):
        missing.chat.completions.create(model="gpt-test", messages=[])
    assert len(FakeProvider.seen) == 2
    assert KEY not in kernel.proc.log_text()
    assert KEY not in json.dumps([event.payload for event in events])
