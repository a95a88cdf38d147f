"""A test runner built only on the public API of the real rebuno==0.4.8 SDK.

Hosts the remote tools ``calc_mul``, ``calc_flaky`` and ``calc_slow``. ``calc_flaky`` fails with a
retryable ToolError the first time it sees a token and succeeds after that, so the
kernel's retry path runs exactly once per token.

Usage: runner.py --runner-id ID --consumer-id CID --markers FILE [--hang]
The kernel URL comes from REBUNO_URL, as for any SDK runner.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import Any

from rebuno import Runner, ToolError, tool

ARGS: argparse.Namespace
SEEN_TOKENS: set[str] = set()


def mark(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "consumer_id": ARGS.consumer_id, **fields}) + "\n"
    fd = os.open(ARGS.markers, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@tool("calc_mul")
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    mark("job", tool_id="calc_mul")
    return a * b


@tool("calc_flaky")
def flaky(token: str) -> dict[str, Any]:
    """Fails once per token with a retryable error, then succeeds."""
    if token not in SEEN_TOKENS:
        SEEN_TOKENS.add(token)
        mark("job", tool_id="calc_flaky", outcome="retryable-failure")
        raise ToolError("temporary failure, try again", retryable=True)
    mark("job", tool_id="calc_flaky", outcome="success")
    return {"token": token, "ok": True}


@tool("calc_slow")
async def slow(seconds: float) -> dict[str, Any]:
    """Sleeps `seconds` (forever with --hang), then names the runner that ran it."""
    mark("job", tool_id="calc_slow")
    await asyncio.sleep(3600 if ARGS.hang else seconds)
    mark("job-done", tool_id="calc_slow")
    return {"runner": ARGS.runner_id, "slept": seconds}


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--runner-id", required=True)
    p.add_argument("--consumer-id", required=True)
    p.add_argument("--markers", required=True)
    p.add_argument("--hang", action="store_true", help="calc_slow never finishes")
    ARGS = p.parse_args()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    Runner(
        ARGS.runner_id,
        consumer_id=ARGS.consumer_id,
        tools=[mul, flaky, slow],
        reconnect_delay=0.5,
    ).run()


if __name__ == "__main__":
    main()
