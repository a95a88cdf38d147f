"""MCP progress notifications (docs/mcp.md, "Progress"): `keel runner --mcp` relays what a tool
reports with `notifications/progress` to the kernel, which records it on the step as
`step.progress` events, at most 20 per step."""

from __future__ import annotations

import httpx
from rebuno.types import ExecutionStatus

from harness import Sandbox
from test_mcp import Setup


def progress_events(setup: Setup, execution_id: str) -> list[dict]:
    return [e for e in setup.kernel.events(execution_id) if e["type"] == "step.progress"]


def test_progress_notifications_are_recorded_on_the_step(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    final = setup.run_calls([{"tool": "progress", "args": {"steps": 3, "pause": 0.4}}])
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["calls"] == [{"result": {"result": "progressed"}}]
    events = setup.kernel.events(final.id)
    [step_id] = {e["step_id"] for e in events if e["type"] == "step.created"}
    progress = progress_events(setup, final.id)
    assert [e["payload"] for e in progress] == [
        {"progress": 1.0, "total": 3.0, "message": "step 1 of 3"},
        {"progress": 2.0, "total": 3.0, "message": "step 2 of 3"},
        {"progress": 3.0, "total": 3.0, "message": "step 3 of 3"},
    ]
    assert {e["step_id"] for e in progress} == {step_id}
    # Recorded while the step ran: after step.started, before step.completed.
    types = [e["type"] for e in events if e.get("step_id") == step_id]
    assert types.index("step.started") < types.index("step.progress")
    assert types.index("step.completed") > len(types) - 2


def test_progress_is_bounded_per_step(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    final = setup.run_calls([{"tool": "progress", "args": {"steps": 26, "pause": 0.3}}])
    assert final.status == ExecutionStatus.COMPLETED, final
    assert final.output["calls"] == [{"result": {"result": "progressed"}}]
    progress = [e["payload"]["progress"] for e in progress_events(setup, final.id)]
    # The first 20 reports are kept; the rest is dropped (and the call is not disturbed).
    assert len(progress) == 20, progress
    assert progress == sorted(progress) and progress[0] == 1.0


def test_bad_progress_reports_are_refused_and_change_nothing(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    final = setup.run_calls([{"tool": "progress", "args": {"steps": 1, "pause": 0.1}}])
    [step_id] = {e["step_id"] for e in setup.kernel.events(final.id) if e["type"] == "step.created"}
    before = setup.kernel.events(final.id)
    url = f"{setup.kernel.url}/v0/runners/steps/{step_id}/progress"
    body = {"execution_id": final.id, "runner_id": setup.runner.name}
    missing = httpx.post(url, json=body, timeout=5)
    assert missing.status_code == 400 and missing.json()["code"] == "VALIDATION_ERROR", missing.text
    wrong = httpx.post(url, json={**body, "progress": "half"}, timeout=5)
    assert wrong.status_code == 400, wrong.text
    unknown = httpx.post(
        f"{setup.kernel.url}/v0/runners/steps/no-such-step/progress",
        json={**body, "progress": 1}, timeout=5,
    )
    assert unknown.status_code == 404, unknown.text
    # A report for a step that has ended is accepted and dropped.
    late = httpx.post(url, json={**body, "progress": 5, "message": "late"}, timeout=5)
    assert late.status_code == 200, late.text
    assert setup.kernel.events(final.id) == before
