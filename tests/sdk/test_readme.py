"""The README walkthrough's programs (runner.py, agent.py, client.py) work as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx

from harness import REPO, Kernel, Sandbox, wait_until


def readme_files() -> dict[str, str]:
    text = (REPO / "README.md").read_text()
    return dict(re.findall(r"cat > (\S+) <<'EOF'\n(.*?\n)EOF\n", text, re.S))


def create(kernel: Kernel, inp: dict) -> str:
    r = httpx.post(kernel.url + "/v0/executions", json={"agent_id": "assistant", "input": inp}, timeout=5)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_readme_walkthrough(sandbox: Sandbox, kernel: Kernel) -> None:
    files = readme_files()
    assert set(files) == {"runner.py", "agent.py", "client.py"}
    scripts: dict[str, Path] = {}
    for name, body in files.items():
        scripts[name] = sandbox.workdir / name
        scripts[name].write_text(body)

    runner = sandbox.spawn(kernel, "readme-runner", scripts["runner.py"], [])
    runner.wait_for_log(r'/v0/runners/stream\S* "HTTP/1\.1 200')
    agent = sandbox.spawn(kernel, "readme-agent", scripts["agent.py"], [])
    agent.wait_for_log(r'/v0/agents/stream\S* "HTTP/1\.1 200')

    # Create with curl's request; the output holds both local tools and the remote one.
    eid = create(kernel, {"city": "Oslo", "note": "ship it"})
    done = kernel.wait_status(eid, "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    out = done["output"]
    assert out["words"] == 2 and out["note"] == "SHIP IT!" and out["approved_by"] is None
    assert out["forecast"] == {"city": "Oslo", "sky": "sunny", "high_c": 21}

    # client.py: create, signal, stream to the end, print the output.
    proc = subprocess.run(
        [sys.executable, str(scripts["client.py"])],
        env=sandbox_env(kernel),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 0, proc.stderr
    assert "execution.completed" in proc.stdout
    assert "'approved_by': {'by': 'client.py'}" in proc.stdout

    # Cancel a waiting execution: the agent's log says the handler was cancelled.
    eid = create(kernel, {"city": "Oslo", "note": "never approved", "approval": True})
    kernel.wait_status(eid, "blocked")
    wait_until("the approval wait", lambda: any(
        e["type"] == "execution.blocked" and e["payload"]["reason"] == "signal" for e in kernel.events(eid)
    ))
    r = httpx.post(f"{kernel.url}/v0/executions/{eid}/cancel", timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    agent.wait_for_log("Execution cancelled by kernel; cancelling handler task")

    # A second consumer: new executions are spread over both.
    second = sandbox.spawn(kernel, "readme-agent-2", scripts["agent.py"], [])
    second.wait_for_log(r'/v0/agents/stream\S* "HTTP/1\.1 200')
    ids = [create(kernel, {"city": "Oslo", "note": "round robin"}) for _ in range(4)]
    finals = [kernel.wait_status(i, "completed", "failed", "cancelled") for i in ids]
    consumers = Counter(f["output"]["consumer"] for f in finals)
    assert len(consumers) == 2, consumers


def sandbox_env(kernel: Kernel) -> dict[str, str]:
    env = dict(os.environ)
    env["REBUNO_URL"] = kernel.url
    env.pop("REBUNO_API_KEY", None)
    return env
