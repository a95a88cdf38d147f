"""Overhead of an MCP tool call through Keel (issue 37, docs/mcp.md "Performance").

The same MCP client (the official Python SDK) calls the same no-op tool (`echo` of
tests/sdk/agents/mcp_server.py) two ways, at each concurrency C:

  direct   the client starts the server over stdio and calls it;
  keel     the client calls the kernel's MCP endpoint of an execution
           (`/v0/executions/{id}/mcp`, as an agent holding it), so each call is a policy-checked
           step dispatched to `keel runner --mcp`, which calls the same server over stdio.

Reported per mode and C: calls, p50/p99 latency (ms) and CPU per call (µs) of the processes
involved (direct: the server; keel: kernel + runner + server; the client's own CPU is not
counted in either). The overhead is keel − direct. Run on a quiet machine with the production
build:

    cargo build --profile production
    target/sdk-venv/bin/python scripts/bench_mcp_overhead.py --keel target/production/keel \
        --calls 2000 --concurrency 1 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, str(ROOT / "tests" / "sdk" / "agents" / "mcp_server.py")]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(session, tool: str, calls: int, concurrency: int) -> list[float]:
    """`calls` calls of `tool` from `concurrency` tasks; the latency of each, in seconds."""
    latencies: list[float] = []
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            start = time.perf_counter()
            result = await session.call_tool(tool, {"text": "x"})
            latencies.append(time.perf_counter() - start)
            if result.is_error:
                raise RuntimeError(f"{tool} failed: {result.content}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def measure(session, tool: str, pids: list[int], calls: int, concurrency: int) -> dict:
    await drive(session, tool, max(20, calls // 10), concurrency)  # warm up
    before = sum(cpu_seconds(pid) for pid in pids)
    latencies = await drive(session, tool, calls, concurrency)
    cpu = sum(cpu_seconds(pid) for pid in pids) - before
    return {
        "calls": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1e3, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1e3, 3),
        "cpu_us_per_call": round(cpu * 1e6 / len(latencies), 1),
    }


async def direct(calls: int, levels: list[int]) -> dict:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], env={"PATH": os.environ["PATH"]})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        pid = (await session.call_tool("pid", {})).structured_content["result"]
        return {c: await measure(session, "echo", [pid], calls, c) for c in levels}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, probe, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    raise TimeoutError(what)


def through_keel(keel: str, calls: int, levels: list[int]) -> dict:
    """Starts a kernel, `keel runner --mcp` and an agent (this script with --agent), whose
    handler runs the measurement through the execution's MCP endpoint."""
    work = Path(tempfile.mkdtemp(prefix="keel-mcp-bench-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RUST_LOG": "warn"}
    logs = [open(work / name, "w") for name in ("kernel.log", "runner.log", "agent.log")]
    kernel = subprocess.Popen(
        [keel, "dev", "--port", str(port), "--data-dir", str(work / "data")],
        stdout=logs[0], stderr=subprocess.STDOUT, env=env,
    )
    procs = [kernel]
    try:
        wait_for("the kernel", lambda: httpx.get(url + "/v0/health", timeout=1).is_success)
        runner = subprocess.Popen(
            [keel, "runner", "--mcp", "--url", url, "--runner-id", "bench", "--tool-prefix", "b.",
             "--parallel", str(max(levels)), "--env-allow", "PATH", "--", *SERVER],
            stdout=logs[1], stderr=subprocess.STDOUT, env=env,
        )
        procs.append(runner)
        wait_for("the runner's tools", lambda: httpx.get(url + "/v0/tools", timeout=1).json())
        agent = subprocess.Popen(
            [sys.executable, __file__, "--agent", "--url", url, "--calls", str(calls),
             "--concurrency", *map(str, levels), "--pids", str(kernel.pid), str(runner.pid)],
            stdout=logs[2], stderr=subprocess.STDOUT, env={**env, "REBUNO_URL": url},
        )
        procs.append(agent)
        created = httpx.post(url + "/v0/executions", json={"agent_id": "mcp-bench", "input": {}}, timeout=5)
        created.raise_for_status()
        eid = created.json()["id"]
        done = wait_for(
            "the measurement",
            lambda: (e := httpx.get(f"{url}/v0/executions/{eid}", timeout=5).json())["status"]
            in ("completed", "failed") and e,
            timeout=3600,
        )
        if done["status"] != "completed":
            raise RuntimeError(f"the bench execution failed: {done}")
        return {int(c): result for c, result in done["output"].items()}
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()


def agent_main(args: argparse.Namespace) -> None:
    """The agent: holds the bench execution and measures through its MCP endpoint."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from rebuno import Agent, execution

    async def handle(_input: dict) -> dict:
        # The server behind the runner: its pid through the same path.
        mcp_url = f"{args.url}/v0/executions/{execution.id}/mcp"
        headers = {"Keel-Session": execution.session_id}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=600)) as http:
            async with streamable_http_client(mcp_url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    server = (await session.call_tool("b.pid", {})).structured_content["result"]
                    pids = [*args.pids, server]
                    return {
                        str(c): await measure(session, "b.echo", pids, args.calls, c)
                        for c in args.concurrency
                    }

    Agent("mcp-bench", consumer_id="mcp-bench-agent", reconnect_delay=0.5).run(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keel", default=str(ROOT / "target" / "production" / "keel"))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--pids", type=int, nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agent:
        agent_main(args)
        return
    report = {"direct": asyncio.run(direct(args.calls, args.concurrency)),
              "keel": through_keel(args.keel, args.calls, args.concurrency)}
    for c in args.concurrency:
        d, k = report["direct"][c], report["keel"][c]
        report.setdefault("overhead", {})[c] = {
            "p50_ms": round(k["p50_ms"] - d["p50_ms"], 3),
            "p99_ms": round(k["p99_ms"] - d["p99_ms"], 3),
            "cpu_us_per_call": round(k["cpu_us_per_call"] - d["cpu_us_per_call"], 1),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
