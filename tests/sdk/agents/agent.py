"""A test agent built only on the public API of the real rebuno==0.4.8 SDK.

One process serves one (agent_id, consumer_id). What a handler does is chosen by the
execution's input field ``op``; every output carries the consumer that produced it, so a
test can tell which process finished an execution.

Markers (one JSON object per line, appended to --markers) tell the tests what the
handler saw: ``start``, ``cancelled`` (the SDK cancelled the handler task), ``done``.

Usage: agent.py --agent-id ID --consumer-id CID --markers FILE [--hang]
The kernel URL comes from REBUNO_URL, as for any SDK agent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import Any

from rebuno import Agent, PolicyError, ToolError, execution, remote, tool

ARGS: argparse.Namespace


def mark(event: str, **fields: Any) -> None:
    """Append one marker line; O_APPEND keeps concurrent lines whole."""
    line = json.dumps({"event": event, "consumer_id": ARGS.consumer_id, **fields}) + "\n"
    fd = os.open(ARGS.markers, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


# Local tools: the SDK runs them in this process and reports the step result.
@tool("math.add")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool("text.shout")
async def shout(text: str) -> str:
    """Upper-case a string."""
    await asyncio.sleep(0)
    return text.upper() + "!"


@tool("text.fail")
def broken(reason: str) -> str:
    """Always raises: the SDK reports a failed step."""
    raise ValueError(reason)


@tool("slow.hang")
async def hang_tool() -> None:
    """Never returns (used while the process is killed)."""
    await asyncio.sleep(3600)


@tool("danger.rm")
def danger_rm(path: str) -> str:
    """Denied by the test policy; the body must never run."""
    mark("danger-ran", path=path)
    return "removed " + path


@tool("safe.echo")
def echo(value: Any) -> Any:
    """Allowed by the test policy."""
    return value


@tool("guarded.echo")
def guarded_echo(value: Any) -> Any:
    """Needs a human approval under the approval test policy."""
    mark("guarded-ran", value=value)
    return value


@tool("slow.sleep")
async def slow_sleep(seconds: float) -> float:
    """Sleeps, then returns how long it slept."""
    await asyncio.sleep(seconds)
    return seconds


@tool("data.blob")
def blob(size: int) -> str:
    """Returns a string of `size` bytes."""
    return "x" * size


@tool("fs.read")
def fs_read(path: str) -> dict[str, Any]:
    """Reads a "file" (returns a secret); hooks guard it in the hook tests."""
    mark("fs-read-ran", path=path)
    return {"path": path, "token": "secret-" + path}


# Remote tools hosted by tests/sdk/agents/runner.py, discovered through the kernel.
calc = remote.Tools("calc")
# MCP tools published by `keel runner --mcp --tool-prefix mcpt.` (tests/sdk/test_mcp.py).
mcpt = remote.Tools("mcpt")


async def op_tools(inp: dict[str, Any]) -> dict[str, Any]:
    total = await add(a=inp["a"], b=inp["b"])
    loud = await shout(text=inp["word"])
    return {"sum": total, "shout": loud}


async def op_remote(inp: dict[str, Any]) -> dict[str, Any]:
    # Via the remote.Tools handle (ids come from the kernel's tool directory) ...
    product = await calc["calc_mul"](a=inp["a"], b=inp["b"])
    # ... and via the execution proxy, remote because no local runner is given.
    flaky = await execution.invoke_tool("calc_flaky", {"token": inp["token"]})
    return {"product": product, "flaky": flaky, "remote_tools": sorted(calc.tools)}


async def op_signal(inp: dict[str, Any]) -> dict[str, Any]:
    payloads = []
    for signal_type in inp["signals"]:
        payloads.append(await execution.wait_signal(signal_type))
    return {"payloads": payloads}


async def op_hold(inp: dict[str, Any]) -> dict[str, Any]:
    return {"finished": await execution.wait_signal(inp.get("signal", "finish"))}


async def op_work(inp: dict[str, Any]) -> dict[str, Any]:
    if ARGS.hang:
        if inp.get("in_tool"):
            await hang_tool()
        else:
            await asyncio.sleep(3600)
    await asyncio.sleep(float(inp.get("sleep", 0)))
    return {"n": inp.get("n")}


async def op_policy(inp: dict[str, Any]) -> dict[str, Any]:
    echoed = await echo(value=inp.get("value", "ok"))
    if not inp.get("catch"):
        await danger_rm(path="/")  # PolicyError propagates: the SDK sends a fail intent
    try:
        await danger_rm(path="/")
    except PolicyError as e:
        return {"echo": echoed, "denied": str(e), "error_type": type(e).__name__}
    return {"echo": echoed, "denied": None}


async def op_hooked(inp: dict[str, Any]) -> dict[str, Any]:
    """A local call guarded by hooks; a refusal comes back as PolicyError with its reason."""
    try:
        return {"read": await fs_read(path=inp["path"])}
    except PolicyError as e:
        return {"denied": str(e), "rule_id": e.rule_id}


async def op_budget(inp: dict[str, Any]) -> dict[str, Any]:
    """Calls an allowed tool until a budget denies the call (PolicyError)."""
    calls = 0
    for _ in range(int(inp.get("max", 10))):
        try:
            await echo(value=calls)
        except PolicyError as e:
            return {"calls": calls, "denied": str(e), "error_type": type(e).__name__}
        calls += 1
    return {"calls": calls, "denied": None}


async def op_tool_error(inp: dict[str, Any]) -> dict[str, Any]:
    try:
        await broken(reason=inp.get("reason", "boom"))
    except ToolError as e:
        return {"tool_error": str(e)}
    return {"tool_error": None}


async def op_parallel(inp: dict[str, Any]) -> dict[str, Any]:
    calls = [add(a=1, b=2), shout(text="par"), slow_sleep(seconds=0.2)]
    if inp.get("remote"):
        calls.append(calc["calc_mul"](a=3, b=4))
    return {"results": list(await asyncio.gather(*calls))}


async def op_idle(inp: dict[str, Any]) -> dict[str, Any]:
    # Longer than the kernel's --agent-timeout while the stream stays connected.
    await asyncio.sleep(float(inp["sleep"]))
    return {"sum": await add(a=20, b=22)}


async def op_slow_tool(inp: dict[str, Any]) -> dict[str, Any]:
    return {"slept": await slow_sleep(seconds=float(inp["sleep"]))}


async def op_big(inp: dict[str, Any]) -> dict[str, Any]:
    return {"length": len(await blob(size=int(inp["size"])))}


async def op_fail(inp: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError(inp.get("error", ""))


async def op_approval(inp: dict[str, Any]) -> dict[str, Any]:
    local = await guarded_echo(value="approved-local")
    remote_product = await calc["calc_mul"](a=5, b=5)
    try:
        await guarded_echo(value="should-be-denied")
        denied = None
    except PolicyError as e:
        denied = str(e)
    return {"local": local, "remote": remote_product, "denied": denied}


async def op_call(inp: dict[str, Any]) -> dict[str, Any]:
    """Calls one remote tool by id."""
    return {"result": await execution.invoke_tool(inp["tool"], inp.get("args", {}))}


async def op_llm(inp: dict[str, Any]) -> dict[str, Any]:
    """Two model calls through the kernel's LLM gateway with the official openai package: the
    base URL names the execution, the Keel-Session header proves this handler holds it."""
    import openai  # only this op needs it

    client = openai.AsyncOpenAI(
        base_url=f"{os.environ['REBUNO_URL']}/v0/executions/{execution.id}/llm/openai/v1",
        api_key="not-the-provider-key",
        default_headers={"Keel-Session": execution.session_id},
        max_retries=0,
        timeout=10,
    )
    messages = [{"role": "user", "content": "hi"}]
    plain = await client.chat.completions.create(model=inp["model"], messages=messages)
    stream = await client.chat.completions.create(model=inp["model"], messages=messages, stream=True)
    streamed = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
    return {"plain": plain.choices[0].message.content, "streamed": streamed}


async def op_anthropic(inp: dict[str, Any]) -> dict[str, Any]:
    """Two model calls through the kernel's LLM gateway with the official anthropic package, a
    whole answer and a stream; the Keel-Session header proves this handler holds the execution."""
    import anthropic  # only this op needs it

    client = anthropic.AsyncAnthropic(
        base_url=f"{os.environ['REBUNO_URL']}/v0/executions/{execution.id}/llm/{inp['provider']}",
        api_key="not-the-provider-key",
        default_headers={"Keel-Session": execution.session_id},
        max_retries=0,
        timeout=10,
    )
    messages = [{"role": "user", "content": "hi"}]
    plain = await client.messages.create(model=inp["model"], max_tokens=16, messages=messages)
    async with client.messages.stream(model=inp["model"], max_tokens=16, messages=messages) as stream:
        streamed = await stream.get_final_text()
    return {"plain": plain.content[0].text, "streamed": streamed}


async def op_mcp(inp: dict[str, Any]) -> dict[str, Any]:
    """Calls MCP-backed tools through remote.Tools("mcpt"), one after the other, or all at once
    with `parallel` (rebuno 0.4.8 indexes the handle by the full tool id)."""

    async def one(call: dict[str, Any]) -> dict[str, Any]:
        try:
            tool = mcpt["mcpt." + call["tool"]]
            return {"result": await tool(**call.get("args", {}))}
        except (PolicyError, ToolError) as e:
            return {"error": type(e).__name__, "message": str(e)}

    if inp.get("parallel"):
        calls = list(await asyncio.gather(*(one(call) for call in inp["calls"])))
    else:
        calls = [await one(call) for call in inp["calls"]]
    return {"calls": calls, "tools": sorted(mcpt.tools)}


async def op_mcp_client(inp: dict[str, Any]) -> dict[str, Any]:
    """An MCP client (the official Python SDK) inside the handler: it reaches the kernel's
    tools through this execution's MCP endpoint, the Keel-Session header proving it holds the
    execution, lists them and makes the input's calls in order (all at once with `parallel`)."""
    import httpx2  # only this op needs the MCP client and its HTTP client
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    url = f"{os.environ['REBUNO_URL']}/v0/executions/{execution.id}/mcp"
    headers = {"Keel-Session": inp.get("session") or execution.session_id}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=120)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                tools = {tool.name: tool for tool in listed.tools}

                async def one(call: dict[str, Any]) -> dict[str, Any]:
                    result = await session.call_tool(call["tool"], call.get("args", {}))
                    return {
                        "is_error": bool(result.is_error),
                        "text": [block.text for block in result.content if block.type == "text"],
                        "structured": result.structured_content,
                    }

                if inp.get("parallel"):
                    calls = list(await asyncio.gather(*(one(call) for call in inp["calls"])))
                else:
                    calls = [await one(call) for call in inp["calls"]]
    schemas = {name: tool.input_schema for name, tool in tools.items()}
    return {"tools": sorted(tools), "schemas": schemas, "calls": calls}


async def op_restart(inp: dict[str, Any]) -> dict[str, Any]:
    """Survives a kernel restart: a wait, a pause, then a tool call and complete."""
    if inp.get("signal"):
        payload = await execution.wait_signal(inp["signal"])
    else:
        payload = None
    await asyncio.sleep(float(inp.get("sleep", 0)))
    total = await add(a=1, b=1)
    return {"payload": payload, "sum": total, "session": execution.session_id}


async def op_journey(inp: dict[str, Any]) -> dict[str, Any]:
    """Remote calls (two identical), a pause where a --hang agent stops for good, then one
    more call: a re-run replays the calls made before the pause (issue 33)."""
    a, b = inp["a"], inp["b"]
    first = await calc["calc_mul"](a=a, b=b)
    again = await calc["calc_mul"](b=b, a=a)
    third = await calc["calc_mul"](a=first, b=7)
    mark("paused", execution_id=execution.id)
    if ARGS.hang:
        await asyncio.sleep(3600)
    last = await calc["calc_mul"](a=third, b=1)
    return {"products": [first, again, third, last]}


async def op_gated(inp: dict[str, Any]) -> dict[str, Any]:
    """A wait, a remote call and a local call that both need an approval, then a pause where a
    --hang agent stops for good: a re-run gets the signal and the approvals again (issue 33)."""
    go = await execution.wait_signal("go")
    product = await calc["calc_mul"](a=go["a"], b=2)
    echoed = await guarded_echo(value=product)
    mark("paused", execution_id=execution.id)
    if ARGS.hang:
        await asyncio.sleep(3600)
    last = await add(a=echoed, b=1)
    return {"go": go, "product": product, "echoed": echoed, "last": last}


async def op_labels(inp: dict[str, Any]) -> dict[str, Any]:
    """Returns the labels the SDK's execution proxy carries."""
    return {"labels": dict(execution.labels or {})}


OPS = {
    "labels": op_labels,
    "tools": op_tools,
    "remote": op_remote,
    "signal": op_signal,
    "hold": op_hold,
    "work": op_work,
    "policy": op_policy,
    "budget": op_budget,
    "tool_error": op_tool_error,
    "parallel": op_parallel,
    "idle": op_idle,
    "slow_tool": op_slow_tool,
    "big": op_big,
    "fail": op_fail,
    "approval": op_approval,
    "restart": op_restart,
    "call": op_call,
    "journey": op_journey,
    "llm": op_llm,
    "anthropic": op_anthropic,
    "gated": op_gated,
    "mcp": op_mcp,
    "mcp_client": op_mcp_client,
    "hooked": op_hooked,
}


async def handle(payload: dict) -> Any:
    eid = execution.id
    mark("start", execution_id=eid, op=payload.get("op"))
    try:
        out = await OPS[payload["op"]](payload)
    except asyncio.CancelledError:
        mark("cancelled", execution_id=eid)
        raise
    out["consumer"] = ARGS.consumer_id
    mark("done", execution_id=eid)
    return out


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--agent-id", required=True)
    p.add_argument("--consumer-id", required=True)
    p.add_argument("--markers", required=True)
    p.add_argument("--hang", action="store_true", help="op=work never finishes")
    ARGS = p.parse_args()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Reconnect fast: the tests run with a 1 s disconnect grace.
    agent = Agent(ARGS.agent_id, consumer_id=ARGS.consumer_id, reconnect_delay=0.5)
    agent.run(handle)


if __name__ == "__main__":
    main()
