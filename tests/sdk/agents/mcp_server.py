"""An MCP server over stdio, written with the official Python MCP SDK, for `keel runner --mcp`.

Every tools/call is counted: a line with the tool name and its arguments is appended to the
file named by MCP_CALLS_FILE (when set) before the tool runs, so a test can tell which calls
reached the server.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import anyio

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("keel-test")


def count(tool: str, event: str = "call", **arguments: Any) -> None:
    path = os.environ.get("MCP_CALLS_FILE")
    if path:
        line = {"tool": tool, "event": event, "pid": os.getpid(), "arguments": arguments}
        with open(path, "a", encoding="utf-8") as calls:
            calls.write(json.dumps(line) + "\n")


@server.tool(description="Returns the text it is given.")
def echo(text: str) -> str:
    count("echo", text=text)
    return text


@server.tool(description="Adds two integers.")
def add(a: int, b: int) -> dict[str, int]:
    count("add", a=a, b=b)
    return {"sum": a + b}


@server.tool(description="Reads a file of the test's directory (the path is checked by policy).")
def read_file(path: str) -> str:
    count("read_file", path=path)
    with open(path, encoding="utf-8") as file:
        return file.read()


@server.tool(description="Fails with the reason it is given.")
def fail(reason: str) -> str:
    count("fail", reason=reason)
    raise ToolError(reason)


@server.tool(description="Returns `size` characters.")
def blob(size: int) -> str:
    count("blob", size=size)
    return "x" * size


@server.tool(description="Sleeps cooperatively; a cancellation stops it (and is recorded).")
async def slow(seconds: float) -> str:
    count("slow", seconds=seconds)
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        count("slow", event="cancelled")
        raise
    return "slept"


# Calls of `meet` in flight, the most that were at once since none was, and the event that
# releases them once `calls` are.
MEETING = {"in_flight": 0, "peak": 0, "met": anyio.Event()}


@server.tool(description="Waits (at most `bound` seconds) until `calls` calls of it are in flight "
             "at once; answers how many were at most.")
async def meet(calls: int, bound: float) -> int:
    count("meet", calls=calls)
    MEETING["in_flight"] += 1
    MEETING["peak"] = max(MEETING["peak"], MEETING["in_flight"])
    if MEETING["in_flight"] >= calls:
        MEETING["met"].set()
    with anyio.move_on_after(bound):
        await MEETING["met"].wait()
    peak = MEETING["peak"]
    MEETING["in_flight"] -= 1
    if MEETING["in_flight"] == 0:
        MEETING.update(peak=0, met=anyio.Event())
    return peak


@server.tool(description="Reports its progress `steps` times, `pause` seconds apart, then answers.")
async def progress(steps: int, pause: float, ctx: Context) -> str:
    count("progress", steps=steps)
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await anyio.sleep(pause)
    return "progressed"


@server.tool(description="Blocks the whole server, ignoring any cancellation.")
async def stubborn(seconds: float) -> str:
    count("stubborn", seconds=seconds)
    time.sleep(seconds)
    return "done"


@server.tool(description="Kills the server the first time (marker file absent), then answers.")
def crash_once(marker: str) -> str:
    count("crash_once", marker=marker)
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return "survived"


@server.tool(description="Kills the server every time it is called.")
def crash_always() -> str:
    count("crash_always")
    os._exit(1)


def description() -> str:
    """The `changing` tool's description: MCP_DESCRIPTION_FILE's text when it exists."""
    path = os.environ.get("MCP_DESCRIPTION_FILE")
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    return "Version one."


@server.tool(description=description())
def changing() -> str:
    count("changing")
    return "changed nothing"


@server.tool(description="Tells whether MCP_TOKEN is set to the expected secret (never returns it).")
def token_ok(expected_sha256: str) -> bool:
    import hashlib

    count("token_ok")
    token = os.environ.get("MCP_TOKEN", "")
    return hashlib.sha256(token.encode()).hexdigest() == expected_sha256


@server.tool(description="Returns the server's process id.")
def pid() -> int:
    count("pid")
    return os.getpid()


if __name__ == "__main__":
    server.run()
