"""A runner written with keel_sdk: calc.mul, recording the job's idempotency key."""

from __future__ import annotations

import json
import sys

from keel_sdk import Runner, current_job, tool

URL, RUNNER_ID, MARKERS = sys.argv[1], sys.argv[2], sys.argv[3]


@tool("calc.mul")
def mul(a: int, b: int) -> int:
    """Multiplies two integers."""
    with open(MARKERS, "a") as out:
        out.write(json.dumps({"event": "mul-ran", "key": current_job().idempotency_key}) + "\n")
    return a * b


Runner(RUNNER_ID, tools=[mul], base_url=URL, reconnect_delay=0.3).run()
