"""A changed MCP tool definition is reported to operators and accepted without a restart
(docs/mcp.md, "Pinning"): the runner withdraws the tool and reports the change to the kernel,
which counts it (keel_mcp_tool_changes_total) and shows it on GET /v0/runners/{id}; `keel
runners accept-changes` accepts it, and the runner pins it and publishes the tool again."""

from __future__ import annotations

import json
import subprocess

import httpx

from harness import Sandbox, keel_bin, wait_until
from test_mcp import Setup, published


def keel(setup: Setup, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(keel_bin()), *args, "--url", setup.kernel.url],
        capture_output=True, text=True, timeout=30,
    )


def runner_view(setup: Setup, runner_id: str) -> dict:
    r = httpx.get(f"{setup.kernel.url}/v0/runners/{runner_id}", timeout=5)
    r.raise_for_status()
    return r.json()


def test_a_changed_definition_is_pending_until_an_operator_accepts_it(sandbox: Sandbox) -> None:
    pins = sandbox.workdir / "pins.json"
    setup = Setup(sandbox, ["--pin-file", str(pins)])
    runner = setup.runner.name
    assert runner_view(setup, runner)["pending_tool_changes"] == []
    # Nothing to accept yet: a clear 404, nothing changes.
    refused = keel(setup, "runners", "accept-changes", runner)
    assert refused.returncode != 0 and "no pending tool change" in refused.stderr, refused
    pinned = json.loads(pins.read_text())["tools"]["changing"]

    # The definition changes under the runner (the server restarts after a crash).
    setup.description_file.write_text("Version two: also uploads your files.")
    final = setup.run_calls([{"tool": "crash_once", "args": {"marker": str(setup.dir / "m")}}])
    assert final.output["calls"] == [{"result": {"result": "survived"}}]
    view = wait_until(
        "the change to be pending on the runner",
        lambda: (v := runner_view(setup, runner))["pending_tool_changes"] and v,
        15,
    )
    [change] = view["pending_tool_changes"]
    assert change["tool_id"] == "mcpt.changing" and change["change"] == "changed"
    assert change["pinned"] == pinned and change["listed"] != pinned
    assert "mcpt.changing" not in view["tools"] and "mcpt.echo" in view["tools"]
    metrics = httpx.get(setup.kernel.url + "/metrics", timeout=5).text
    counted = [
        line for line in metrics.splitlines()
        if line.startswith("keel_mcp_tool_changes_total{") and "mcpt.changing" in line
    ]
    assert len(counted) == 1 and counted[0].endswith(" 1"), counted
    assert "definition changed" in setup.kernel.log.read_text()
    shown = keel(setup, "runners", "show", runner)
    assert shown.returncode == 0 and "mcpt.changing changed" in shown.stdout, shown
    # Still withdrawn: not callable, the server never sees a call.
    assert "mcpt.changing" not in published(setup, setup.runner)
    assert json.loads(pins.read_text())["tools"]["changing"] == pinned

    # An operator accepts it: the runner pins it and publishes the tool again.
    accepted = keel(setup, "runners", "accept-changes", runner, "--tool", "mcpt.changing")
    assert accepted.returncode == 0, accepted
    assert "accepted 1 change(s)" in accepted.stdout
    tool = wait_until(
        "mcpt.changing to be published again",
        lambda: published(setup, setup.runner).get("mcpt.changing"),
        15,
    )
    assert tool["description"] == "Version two: also uploads your files."
    assert json.loads(pins.read_text())["tools"]["changing"] == change["listed"]
    final = setup.run_calls([{"tool": "changing", "args": {}}])
    assert final.output["calls"] == [{"result": {"result": "changed nothing"}}]
    wait_until(
        "the runner to report nothing pending",
        lambda: runner_view(setup, runner)["pending_tool_changes"] == []
        and runner_view(setup, runner)["accepted_tool_changes"] == [],
        15,
    )
