"""An agent written with keel_sdk (the rebuno example with a changed import)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import keel_sdk
from keel_sdk import Agent, ApprovalDenied, PolicyDenied, execution, remote, tool

URL, AGENT_ID, MARKERS = sys.argv[1], sys.argv[2], sys.argv[3]
assert "site" in os.path.dirname(keel_sdk.__file__), keel_sdk.__file__  # from the wheel


def mark(event: str, **fields: Any) -> None:
    with open(MARKERS, "a") as out:
        out.write(json.dumps({"event": event, **fields}) + "\n")


@tool("fs.read")
def fs_read(path: str) -> dict[str, Any]:
    """Reads a "file" (returns a secret)."""
    mark("fs-read-ran", path=path)
    return {"path": path, "token": "secret-" + path}


@tool("danger.rm")
def danger_rm(path: str) -> str:
    mark("danger-ran", path=path)
    return "removed"


@tool("guarded.echo")
def guarded_echo(value: Any) -> Any:
    mark("guarded-ran", value=value)
    return value


async def handle(payload: dict) -> Any:  # type: ignore[type-arg]
    op = payload["op"]
    mark("start", execution_id=execution.id, op=op)
    if op == "read":
        return {"read": await fs_read(path=payload["path"])}
    if op == "deny":
        try:
            await danger_rm(path="/")
        except PolicyDenied as error:
            return {"type": type(error).__name__, "reason": error.reason, "rule_id": error.rule_id}
    if op == "approval":
        try:
            await guarded_echo(value="x")
        except ApprovalDenied as error:
            return {"type": type(error).__name__, "reason": error.reason}
    if op == "remote":
        return {"product": await remote.Tools("calc")["calc.mul"](a=6, b=7)}
    if op == "journey":
        # A local call, then a wait (the agent is killed here), then another local call.
        first = await fs_read(path="/a")
        go = await execution.wait_signal("go")
        second = await fs_read(path="/b")
        return {"first": first, "go": go, "second": second}
    if op == "signal":
        return {"signal": await execution.wait_signal("go")}
    return {"unexpected": op}


Agent(AGENT_ID, base_url=URL, reconnect_delay=0.3).run(handle)
