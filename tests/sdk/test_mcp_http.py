"""`keel runner --mcp --mcp-url URL`: the MCP server is reached over Streamable HTTP. The
server is agents/mcp_http_server.py (mcp_server.py's tools in the official Python SDK's HTTP
app), which refuses requests without the expected Authorization header."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from harness import AGENTS, Proc, Sandbox, free_port, keel_bin, unique, wait_until
from rebuno.types import ExecutionStatus
from test_mcp import PREFIX, Setup

TOKEN = "tok-" + "9f3c1e77a2"


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


class HttpSetup(Setup):
    """Setup whose runner reaches the HTTP server instead of starting mcp_server.py."""

    def start_runner(self, flags: list[str]) -> Proc:
        self.port = free_port()
        env = {**os.environ, "MCP_HTTP_TOKEN": TOKEN, "MCP_CALLS_FILE": str(self.calls_file)}
        server = Proc(
            "mcp-http-server",
            [sys.executable, str(AGENTS / "mcp_http_server.py"), str(self.port)],
            self.dir / "mcp-http-server.log",
            env,
        )
        self.sandbox.procs.append(server)
        wait_until("the MCP HTTP server", lambda: listening(self.port), 20)
        self.token_file = self.dir / "token.txt"
        self.token_file.write_text(f"Bearer {TOKEN}\n")
        runner_id = unique("mcp-http-runner")
        argv = [
            str(keel_bin()), "runner", "--mcp",
            "--url", self.kernel.url,
            "--runner-id", runner_id,
            "--tool-prefix", PREFIX,
            "--mcp-url", f"http://127.0.0.1:{self.port}/mcp",
            "--mcp-header-file", f"Authorization={self.token_file}",
            *flags,
        ]
        proc = Proc(runner_id, argv, self.dir / f"{runner_id}.log",
                    {**os.environ, "RUST_LOG": "debug"})
        self.sandbox.procs.append(proc)
        proc.wait_for_log("runner connection open", timeout=20)
        return proc


def test_a_runner_serves_an_mcp_server_over_streamable_http(sandbox: Sandbox) -> None:
    setup = HttpSetup(sandbox)
    secret = setup.dir / "secret.txt"
    secret.write_text("s3cret")
    final = setup.run_calls([
        {"tool": "echo", "args": {"text": "over http"}},
        {"tool": "add", "args": {"a": 20, "b": 22}},
        {"tool": "read_file", "args": {"path": str(secret)}},
        {"tool": "fail", "args": {"reason": "boom"}},
    ])
    assert final.status == ExecutionStatus.COMPLETED, final
    echo, add, denied, fail = final.output["calls"]
    assert echo == {"result": {"result": "over http"}}
    assert add == {"result": {"sum": 42}}
    assert denied["error"] == "PolicyError" and "secrets stay put" in denied["message"]
    assert fail["error"] == "ToolError" and "boom" in fail["message"]
    assert "mcpt.crash_always" in final.output["tools"]
    # The denied call never reached the server; the others did, with their arguments.
    received = [c for c in setup.received() if c["event"] == "call"]
    assert [c["tool"] for c in received] == ["echo", "add", "fail"]
    # The header's value (a secret) is never in the runner's log, even at debug level.
    log = setup.runner.log.read_text()
    assert "MCP server initialised" in log
    assert TOKEN not in log


def test_without_the_header_the_server_refuses_and_the_runner_does_not_start(
    sandbox: Sandbox,
) -> None:
    setup = HttpSetup(sandbox)  # a server with its token, and a working runner
    done = subprocess.run(
        [
            str(keel_bin()), "runner", "--mcp", "--url", setup.kernel.url,
            "--runner-id", "no-header", "--mcp-url", f"http://127.0.0.1:{setup.port}/mcp",
        ],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0, done
    assert "the MCP server did not initialise" in done.stderr, done.stderr
    # Both a URL and a command are refused.
    both = subprocess.run(
        [
            str(keel_bin()), "runner", "--mcp", "--url", setup.kernel.url,
            "--runner-id", "both", "--mcp-url", f"http://127.0.0.1:{setup.port}/mcp",
            "--", sys.executable, "-c", "pass",
        ],
        capture_output=True, text=True, timeout=30,
    )
    assert both.returncode != 0 and "not both" in both.stderr, both.stderr
