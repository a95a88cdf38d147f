"""`keel runner --exec` end to end: a real rebuno==0.4.8 SDK agent calls a remote tool that
the built-in runner serves by running agents/exec_worker.py in a fresh process per job.

Each scenario starts a kernel, the SDK agent (agents/agent.py, op ``call``) and a
`keel runner --exec` process with the flags it needs, then checks the execution's events and,
where a worker is killed, that its process (and its grandchild) are really gone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
from rebuno import Client
from rebuno.types import ExecutionStatus

from harness import AGENTS, Kernel, Proc, Sandbox, keel_bin, run, unique, wait_until

TOOL = "exec_worker"
WORKER = [sys.executable, str(AGENTS / "exec_worker.py")]


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class Setup:
    """A kernel, an SDK agent and a `keel runner --exec` serving TOOL."""

    def __init__(
        self,
        sandbox: Sandbox,
        runner_flags: list[str] | None = None,
        kernel_flags: list[str] | None = None,
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
    ):
        self.sandbox = sandbox
        self.dir = sandbox.workdir
        self.kernel: Kernel = sandbox.kernel("--retry-base-delay", "100ms", *(kernel_flags or []))
        self.agent_id = unique("exec-agent")
        self.agent = sandbox.agent(self.kernel, self.agent_id, unique("exec-agent-c"))
        self.runner = self.start_runner(runner_flags or [], command or WORKER, env or {})
        self.agent.wait_connected()

    def start_runner(self, flags: list[str], command: list[str], env: dict[str, str]) -> Proc:
        runner_id = unique("exec-runner")
        argv = [
            str(keel_bin()), "runner", "--exec",
            "--url", self.kernel.url,
            "--runner-id", runner_id,
            "--tool", TOOL,
            "--env-allow", "PATH",
            "--kill-grace", "1s",
            *flags,
            "--", *command,
        ]
        full_env = {**os.environ, "RUST_LOG": "info", **env}
        proc = Proc(runner_id, argv, self.dir / f"{runner_id}.log", full_env)
        self.sandbox.procs.append(proc)
        proc.wait_for_log("runner connection open", timeout=10)
        return proc

    def call(self, args: dict[str, Any], timeout: float = 20.0) -> tuple[dict, list[dict]]:
        """Runs one execution whose handler calls TOOL with `args`; waits for its end."""
        execution_id = self.create(args)
        final = self.kernel.wait_status(
            execution_id, "completed", "failed", "cancelled", timeout=timeout
        )
        return final, self.kernel.events(execution_id)

    def create(self, args: dict[str, Any]) -> str:
        body = {"agent_id": self.agent_id, "input": {"op": "call", "tool": TOOL, "args": args}}
        r = httpx.post(self.kernel.url + "/v0/executions", json=body, timeout=5)
        r.raise_for_status()
        return r.json()["id"]


def steps(events: list[dict]) -> list[tuple[str, dict]]:
    return [(e["type"], e.get("payload") or {}) for e in events if e["type"].startswith("step.")]


def failures(events: list[dict]) -> list[dict]:
    return [payload for kind, payload in steps(events) if kind == "step.failed"]


def read_pids(path: Path, timeout: float = 10.0) -> dict[str, int]:
    return wait_until(f"worker pid file {path}", lambda: path.exists() and json.loads(path.read_text()), timeout)


def test_success_passes_the_job_line_a_clean_environment_and_the_workdir(sandbox: Sandbox) -> None:
    workdir = sandbox.workdir / "work"
    workdir.mkdir()
    setup = Setup(
        sandbox,
        ["--workdir", str(workdir), "--env-allow", "KEEL_TEST_ALLOWED"],
        env={"KEEL_TEST_ALLOWED": "yes", "KEEL_TEST_SECRET": "must-not-leak"},
    )

    async def scenario():
        async with Client(setup.kernel.url) as client:
            return await client.run_until_complete(
                setup.agent_id,
                input={"op": "call", "tool": TOOL, "args": {"mode": "echo", "n": [1, 2]}},
            )

    final = run(scenario(), timeout=20)
    assert final.status == ExecutionStatus.COMPLETED, final
    data = final.output["result"]
    job = data["job"]
    assert set(job) == {
        "job_id", "execution_id", "step_id", "tool_id", "arguments", "attempt", "deadline",
        "idempotency_key",
    }
    assert job["idempotency_key"] == f"{final.id}:{job['step_id']}"
    assert job["execution_id"] == final.id
    assert job["tool_id"] == TOOL
    assert job["arguments"] == {"mode": "echo", "n": [1, 2]}
    assert job["attempt"] == 1
    assert job["deadline"].endswith("Z") or "+" in job["deadline"]
    # Only the allowed variables reach the worker (Python adds LC_CTYPE itself when no locale
    # is set, PEP 538); stdin ends after the one line.
    assert [name for name in data["env"] if name != "LC_CTYPE"] == [
        "KEEL_IDEMPOTENCY_KEY", "KEEL_TEST_ALLOWED", "PATH",
    ]
    assert data["cwd"] == str(workdir)
    assert data["stdin_rest"] == ""

    events = setup.kernel.events(final.id)
    kinds = [kind for kind, _ in steps(events)]
    assert kinds == ["step.created", "step.dispatched", "step.started", "step.completed"]
    created = next(p for k, p in steps(events) if k == "step.created")
    assert job["step_id"] == next(e["step_id"] for e in events if e["type"] == "step.created")
    assert created["tool_id"] == TOOL


def test_failure_is_reported_with_its_message_and_not_retried(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    final, events = setup.call({"mode": "fail", "error": "disk on fire"})
    assert final["status"] == "failed"
    assert failures(events) == [{"error": "disk on fire", "retryable": False}]
    assert "step.retried" not in [kind for kind, _ in steps(events)]


def test_retryable_failure_runs_the_step_again(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    final, events = setup.call({"mode": "retry_once"})
    assert final["status"] == "completed", final
    assert final["output"]["result"] == {"attempt": 2}
    assert failures(events) == [{"error": "busy, try again", "retryable": True}]
    retried = [p["next_attempt"] for k, p in steps(events) if k == "step.retried"]
    assert retried == [2]


def test_worker_failures_are_retryable_only_with_the_flag(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--worker-failures-retryable"])
    final, events = setup.call({"mode": "crash_once"})
    assert final["status"] == "completed", final
    assert final["output"]["result"] == {"attempt": 2}
    [failure] = failures(events)
    assert failure["retryable"] is True
    assert "signal 9 (SIGKILL)" in failure["error"], failure
    assert "about to crash" in failure["error"], failure


def test_deadline_kills_the_worker_and_its_group(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, kernel_flags=["--step-timeout", "4s"])
    pidfile = sandbox.workdir / "deadline.pids"
    termfile = sandbox.workdir / "deadline.term"
    execution_id = setup.create({"mode": "hang", "pidfile": str(pidfile), "termfile": str(termfile)})
    pids = read_pids(pidfile)
    assert alive(pids["worker"]) and alive(pids["grandchild"])
    final = setup.kernel.wait_status(execution_id, "failed", timeout=10)
    assert final["status"] == "failed"
    wait_until("worker and grandchild gone", lambda: not any(alive(p) for p in pids.values()), 5)
    # SIGTERM reached the worker first (it ignores it), SIGKILL followed.
    assert termfile.read_text().split() == [str(pids["worker"]), "SIGTERM"]
    assert "step.timed_out" in [kind for kind, _ in steps(setup.kernel.events(execution_id))]
    assert setup.runner.alive()


def test_wall_time_limit_kills_the_worker_and_fails_the_attempt(sandbox: Sandbox) -> None:
    # Long enough for the worker to start and write its pid file on a busy machine.
    setup = Setup(sandbox, ["--timeout", "3s"])
    pidfile = sandbox.workdir / "wall.pids"
    final, events = setup.call(
        {"mode": "hang", "pidfile": str(pidfile), "termfile": str(sandbox.workdir / "wall.term")}
    )
    assert final["status"] == "failed"
    [failure] = failures(events)
    assert failure["retryable"] is False
    assert failure["error"].startswith("worker killed: wall time limit of 3s exceeded"), failure
    pids = json.loads(pidfile.read_text())
    assert not any(alive(p) for p in pids.values())


def test_cancel_kills_the_worker_and_posts_nothing(sandbox: Sandbox) -> None:
    setup = Setup(sandbox)
    pidfile = sandbox.workdir / "cancel.pids"
    termfile = sandbox.workdir / "cancel.term"
    execution_id = setup.create({"mode": "hang", "pidfile": str(pidfile), "termfile": str(termfile)})
    pids = read_pids(pidfile)
    r = httpx.post(f"{setup.kernel.url}/v0/executions/{execution_id}/cancel", json={}, timeout=5)
    r.raise_for_status()
    wait_until("worker and grandchild gone", lambda: not any(alive(p) for p in pids.values()), 5)
    assert termfile.read_text().split() == [str(pids["worker"]), "SIGTERM"]
    setup.runner.wait_for_log("job cancelled; killing its worker")
    kinds = [kind for kind, _ in steps(setup.kernel.events(execution_id))]
    assert kinds[-1] == "step.cancelled"
    assert "step.failed" not in kinds and "step.completed" not in kinds
    # The runner is free for the next job.
    final, _ = setup.call({"mode": "retry_once"})
    assert final["status"] == "completed"


def test_output_over_the_limit_fails_the_attempt(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--max-output", "1KiB"])
    final, events = setup.call({"mode": "flood", "bytes": 100_000})
    assert final["status"] == "failed"
    [failure] = failures(events)
    # The worker's write fails once the runner stops reading; its stderr tail follows.
    assert failure["error"].startswith(
        "worker killed: output exceeded the limit of 1024 bytes"
    ), failure
    # A small result still passes on the same runner.
    final, _ = setup.call({"mode": "retry_once"})
    assert final["status"] == "completed"


def test_worker_that_never_reads_stdin_is_killed_and_the_runner_carries_on(
    sandbox: Sandbox,
) -> None:
    pidfile = sandbox.workdir / "nostdin.pids"
    setup = Setup(sandbox, ["--timeout", "3s"], command=[*WORKER, "--no-stdin", str(pidfile)])
    # 256 KiB of arguments: more than a pipe holds, so writing the job line blocks.
    final, events = setup.call({"mode": "echo", "pad": "p" * 256 * 1024})
    assert final["status"] == "failed"
    [failure] = failures(events)
    assert failure["error"].startswith("worker killed: wall time limit of 3s exceeded"), failure
    assert not alive(json.loads(pidfile.read_text())["worker"])
    pidfile.unlink()
    final, _ = setup.call({"mode": "echo"})
    assert final["status"] == "failed"
    assert setup.runner.alive()


def test_worker_that_exits_without_a_line_or_prints_garbage_fails(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--stderr-tail", "64"])
    final, events = setup.call({"mode": "silent_exit"})
    assert final["status"] == "failed"
    [failure] = failures(events)
    assert failure["retryable"] is False
    error = failure["error"]
    assert error.startswith("worker ended with exit status 3 without a result line; stderr: …"), error
    assert error.endswith("something broke"), error
    assert len(error.split("stderr: ", 1)[1].encode()) <= 64 + len("…".encode())

    final, events = setup.call({"mode": "garbage"})
    assert final["status"] == "failed"
    [failure] = failures(events)
    assert "unusable stdout" in failure["error"], failure
    assert '"hello, this is not JSON"' in failure["error"], failure


def test_parallel_runs_jobs_at_once(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--parallel", "2"])
    first = setup.create({"mode": "sleep", "seconds": 2.5})
    second = setup.create({"mode": "sleep", "seconds": 2.5})
    results = []
    for execution_id in (first, second):
        final = setup.kernel.wait_status(execution_id, "completed", timeout=20)
        results.append(final["output"]["result"])
    a, b = results
    assert a["started"] < b["ended"] and b["started"] < a["ended"], results


def test_cpu_and_memory_limits(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--cpu-seconds", "1", "--memory", "512MiB", "--timeout", "30s"])
    final, _ = setup.call({"mode": "allocate", "bytes": 16 * 1024 * 1024})
    assert final["status"] == "completed", final
    final, events = setup.call({"mode": "allocate", "bytes": 2 * 1024 * 1024 * 1024})
    assert final["status"] == "failed"
    assert "MemoryError" in failures(events)[0]["error"]
    final, events = setup.call({"mode": "spin"}, timeout=40)
    assert final["status"] == "failed"
    assert "(SIGXCPU)" in failures(events)[0]["error"], failures(events)


def test_sigterm_stops_the_runner_and_hands_the_job_back(sandbox: Sandbox) -> None:
    setup = Setup(sandbox, ["--shutdown-timeout", "500ms"])
    pidfile = sandbox.workdir / "shutdown.pids"
    execution_id = setup.create(
        {"mode": "hang", "pidfile": str(pidfile), "termfile": str(sandbox.workdir / "s.term")}
    )
    pids = read_pids(pidfile)
    setup.runner.popen.send_signal(signal.SIGTERM)
    assert setup.runner.popen.wait(timeout=15) == 0
    assert not any(alive(p) for p in pids.values())
    setup.kernel.wait_event(execution_id, "step.retried")
    [failure] = failures(setup.kernel.events(execution_id))
    assert failure == {"error": "worker killed: the runner is shutting down", "retryable": True}


def test_documented_example_wraps_wc(sandbox: Sandbox) -> None:
    """deploy/examples/exec-runner/wc.sh, run as docs/guardrails.md shows."""
    example = AGENTS.parent.parent.parent / "deploy" / "examples" / "exec-runner" / "wc.sh"
    setup = Setup(sandbox, ["--timeout", "10s"], command=[str(example)])
    final, _ = setup.call({"text": "hello world\nsecond line\n"})
    assert final["status"] == "completed", final
    assert final["output"]["result"] == {"lines": 2, "words": 4, "bytes": 24}
    final, events = setup.call({"words": "missing"})
    assert final["status"] == "failed"
    assert failures(events)[0]["error"] == 'argument "text" (a string) is required'


def test_the_idempotency_key_is_the_same_across_a_retry_a_runner_failover_and_a_rerun(
    sandbox: Sandbox,
) -> None:
    """Issue 33: the key a worker gets in KEEL_IDEMPOTENCY_KEY names the logical call, not the
    job or the step: attempt 1 fails (retry), attempt 2 hangs and its runner is stopped (another
    runner takes the job), attempt 3 hangs and the agent is killed (the execution is re-run
    and the same call is a new step), and the re-run's call succeeds: four jobs, one key."""
    setup = Setup(sandbox, ["--shutdown-timeout", "500ms"], kernel_flags=["--runner-timeout", "1s"])
    log = sandbox.workdir / "keyed.log"

    def calls() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def wait_calls(n: int) -> None:
        wait_until(f"{n} worker calls", lambda: len(calls()) >= n, timeout=15)

    execution_id = setup.create(
        {"mode": "keyed", "log": str(log), "script": ["retry", "hang", "hang", "ok"]}
    )
    wait_calls(2)
    setup.runner.popen.send_signal(signal.SIGTERM)  # hands attempt 2 back
    assert setup.runner.popen.wait(timeout=15) == 0
    setup.start_runner([], WORKER, {})
    wait_calls(3)
    survivor = sandbox.agent(setup.kernel, setup.agent_id, unique("exec-agent-survivor"))
    survivor.wait_connected()
    setup.agent.proc.kill()
    final = setup.kernel.wait_status(execution_id, "completed", "failed", "cancelled", timeout=20)
    assert final["status"] == "completed", final
    assert final["output"]["result"] == {"calls": 4}
    made = calls()
    assert len(made) == 4
    first_step = made[0]["step_id"]
    assert [c["step_id"] == first_step for c in made] == [True, True, True, False]
    assert [c["attempt"] for c in made] == [1, 2, 3, 1]
    assert {c["key"] for c in made} == {f"{execution_id}:{first_step}"}
    assert all(c["line_key"] == c["key"] for c in made)
    events = setup.kernel.events(execution_id)
    assert "execution.reset" in [e["type"] for e in events]
    rerun_step = next(
        e for e in events if e["type"] == "step.created" and e["step_id"] == made[3]["step_id"]
    )
    assert rerun_step["payload"]["key_of"] == first_step
    for c in made:
        try:
            os.kill(c["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
