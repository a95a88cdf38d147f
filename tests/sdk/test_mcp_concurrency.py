"""Concurrent `tools/call`s through `keel runner --mcp` overlap at the MCP server (MCP allows
concurrent requests on one session): the server's `meet` tool answers how many of its calls
were in flight at once, so the test counts overlap at the server rather than timing anything.
"""

from __future__ import annotations

from harness import Sandbox
from test_mcp import Setup
from test_mcp_endpoint import start

CALLS = 8
# Each call waits at most this long for the others; serialised calls would each give up alone.
BOUND = 5.0


def meets() -> list[dict]:
    return [{"tool": "meet", "args": {"calls": CALLS, "bound": BOUND}} for _ in range(CALLS)]


def test_concurrent_sdk_calls_overlap_at_the_mcp_server(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--parallel", str(CALLS)])
    final = setup.run_calls(meets(), parallel=True)
    assert final.status == "completed", final
    peaks = [call["result"]["result"] for call in final.output["calls"]]
    assert peaks == [CALLS] * CALLS, peaks


def test_concurrent_mcp_client_calls_overlap_at_the_mcp_server(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--parallel", str(CALLS)])
    calls = [{"tool": "mcpt.meet", "args": c["args"]} for c in meets()]
    eid = start(setup, calls, parallel=True)
    final = setup.kernel.wait_status(eid, "completed", timeout=45)
    peaks = [call["structured"]["result"] for call in final["output"]["calls"]]
    assert peaks == [CALLS] * CALLS, peaks
