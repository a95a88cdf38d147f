"""The LLM gateway with the official `openai` package: a kernel started with `--llm-config`
forwards chat completions, plain and streamed, to a scripted provider on loopback with the
provider's key, and the client parses every answer."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import openai
import pytest

from harness import Sandbox, unique

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
    )
    kernel = sandbox.kernel("--llm-config", str(config))
    created = httpx.post(f"{kernel.url}/v0/executions",
                         json={"agent_id": unique("llm"), "input": {}}, timeout=10)
    assert created.status_code == 201, created.text
    execution_id = created.json()["id"]

    client = openai.OpenAI(
        base_url=f"{kernel.url}/v0/executions/{execution_id}/llm/openai/v1",
        api_key="not-the-provider-key", max_retries=0, timeout=10,
    )
    reply = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "Hello"
    assert reply.usage is not None and reply.usage.total_tokens == 6

    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert text == "Hello"

    assert [auth for auth, _ in FakeProvider.seen] == [f"Bearer {KEY}"] * 2
    assert FakeProvider.seen[1][1]["stream"] is True

    # Another execution id that does not exist: the client raises its usual error.
    missing = openai.OpenAI(
        base_url=f"{kernel.url}/v0/executions/0196f1c2-0000-7000-8000-000000000000/llm/openai/v1",
        api_key="x", max_retries=0, timeout=10,
    )
    with pytest.raises(openai.NotFoundError):
        missing.chat.completions.create(model="gpt-test", messages=[])
    assert len(FakeProvider.seen) == 2
    assert KEY not in kernel.proc.log_text()
