"""A crash-looping MCP server opens its runner's circuit breaker (docs/guardrails.md, breakers
per runner): every crash fails the call retryably, the failures count for the runner, and once
the breaker is open the dispatcher hands that runner no job, so the server is not started again
and again for the same doomed call."""

from __future__ import annotations

import time

import httpx

from harness import Sandbox, wait_until
from test_mcp import Setup, start_call

POLICY = """\
circuit_breakers:
  - runner_id: "*"
    failures: 2
    window: 1m
    cool_down: 10m
rules:
  - id: retry-a-lot
    priority: 1
    when:
      tool_id: "mcpt.*"
    then:
      decision: allow
    retry:
      max_attempts: 6
      base_delay: 100ms
      max_delay: 200ms
default:
  decision: allow
"""


def runner_breaker(setup: Setup) -> dict | None:
    body = httpx.get(setup.kernel.url + "/v0/breakers", timeout=5).json()
    return next(
        (b for b in body["breakers"] if b.get("runner_id") == setup.runner.name), None
    )


def test_a_crash_looping_server_opens_the_runners_breaker(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, policy_text=POLICY)
    # The runner works: a call succeeds first (and does not count as a failure).
    final = setup.run_calls([{"tool": "echo", "args": {"text": "ok"}}])
    assert final.output["calls"] == [{"result": {"result": "ok"}}]

    eid = start_call(setup, "crash_always", {})
    opened = wait_until(
        "the runner's breaker to open",
        lambda: (b := runner_breaker(setup)) and b["state"] == "open" and b,
        30,
    )
    assert opened["failures"] == 2
    # Two crashes opened it; each was a retryable failure of the step, on a restarted server.
    crashes = [c for c in setup.received() if c["tool"] == "crash_always"]
    assert len(crashes) == 2 and crashes[0]["pid"] != crashes[1]["pid"], crashes
    failed = [e["payload"] for e in setup.kernel.events(eid) if e["type"] == "step.failed"]
    assert len(failed) == 2 and all(f["retryable"] for f in failed), failed
    # While it is open the runner gets no job: the step's further attempts wait, the server is
    # not started again for them (six attempts were allowed).
    time.sleep(3)
    assert len([c for c in setup.received() if c["tool"] == "crash_always"]) == 2
    assert setup.kernel.status(eid) not in ("completed", "failed")
    assert runner_breaker(setup)["state"] == "open"
