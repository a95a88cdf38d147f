"""The README walkthrough works as written: its runner.py and agent.py, and its `keel` commands
run verbatim by bash against a kernel, with REBUNO_URL set as the README sets it."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter

import httpx

from harness import REPO, Kernel, Sandbox, keel_bin, wait_until


def readme() -> str:
    return (REPO / "README.md").read_text()


def readme_files() -> dict[str, str]:
    return dict(re.findall(r"cat > (\S+) <<'EOF'\n(.*?\n)EOF\n", readme(), re.S))


def readme_commands() -> str:
    """The shell block that starts with `keel executions create` (the walkthrough's CLI part)."""
    match = re.search(r"```sh\n(keel executions create .*?)```", readme(), re.S)
    assert match, "README lost its walkthrough block that starts with `keel executions create`"
    return match.group(1)


def create(kernel: Kernel, inp: dict) -> str:
    r = httpx.post(kernel.url + "/v0/executions", json={"agent_id": "assistant", "input": inp}, timeout=5)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def walkthrough_env(kernel: Kernel) -> dict[str, str]:
    env = dict(os.environ)
    env["REBUNO_URL"] = kernel.url
    env["PATH"] = f"{keel_bin().resolve().parent}:{env.get('PATH', '')}"
    for name in ("REBUNO_API_KEY", "KEEL_URL", "KEEL_TOKEN"):
        env.pop(name, None)
    return env


def test_readme_walkthrough(sandbox: Sandbox, kernel: Kernel) -> None:
    files = readme_files()
    assert set(files) == {"runner.py", "agent.py"}
    scripts = {}
    for name, body in files.items():
        scripts[name] = sandbox.workdir / name
        scripts[name].write_text(body)

    runner = sandbox.spawn(kernel, "readme-runner", scripts["runner.py"], [])
    runner.wait_for_log(r'/v0/runners/stream\S* "HTTP/1\.1 200')
    agent = sandbox.spawn(kernel, "readme-agent", scripts["agent.py"], [])
    agent.wait_for_log(r'/v0/agents/stream\S* "HTTP/1\.1 200')

    # The CLI block, verbatim: every command must succeed.
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_commands()],
        env=walkthrough_env(kernel),
        cwd=sandbox.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "status   completed" in out, out  # create --wait printed the finished execution
    assert "signal approve sent to" in out, out
    assert "execution.completed" in out, out  # watch followed it to its end

    # What it left behind: both executions complete, the second approved by "ana".
    page = kernel.get("/v0/executions", agent_id="assistant", limit=10)
    ids = [e["id"] for e in page["executions"]]
    assert len(ids) == 2, page
    finals = [kernel.wait_status(i, "completed", "failed", "cancelled") for i in ids]
    assert all(f["status"] == "completed" for f in finals), finals
    outputs = sorted((f["output"] for f in finals), key=lambda o: o["forecast"]["city"])
    assert outputs[0]["forecast"] == {"city": "Lima", "sky": "sunny", "high_c": 21}
    assert outputs[0]["approved_by"] == {"by": "ana"}
    assert outputs[1]["words"] == 2 and outputs[1]["approved_by"] is None

    # Cancel a waiting execution: the agent's log says the handler was cancelled.
    eid = create(kernel, {"city": "Oslo", "note": "never approved", "approval": True})
    wait_until("the approval wait", lambda: any(
        e["type"] == "execution.blocked" and e["payload"]["reason"] == "signal" for e in kernel.events(eid)
    ))
    cancel = subprocess.run(
        [str(keel_bin()), "executions", "cancel", eid], env=walkthrough_env(kernel), capture_output=True, text=True, timeout=20
    )
    assert cancel.returncode == 0, cancel.stderr
    assert kernel.status(eid) == "cancelled"
    agent.wait_for_log("Execution cancelled by kernel; cancelling handler task")

    # A second consumer: new executions are spread over both.
    second = sandbox.spawn(kernel, "readme-agent-2", scripts["agent.py"], [])
    second.wait_for_log(r'/v0/agents/stream\S* "HTTP/1\.1 200')
    ids = [create(kernel, {"city": "Oslo", "note": "round robin"}) for _ in range(4)]
    finals = [kernel.wait_status(i, "completed", "failed", "cancelled") for i in ids]
    consumers = Counter(f["output"]["consumer"] for f in finals)
    assert len(consumers) == 2, consumers


# Pages for contributors may name internal documents, types and files; pages for users may not.
CONTRIBUTOR_PAGES = {"architecture.md", "testing.md", "development.md", "benchmarks.md", "benchmarks-history.md"}
INTERNAL = [
    (re.compile(r"WIRE\.md|DESIGN\.md|STYLE\.md"), "an internal document"),
    (re.compile(r"\bthe seeds?\b|seed docs", re.I), "the seed documents"),
    (re.compile(r"reference kernel", re.I), "'the reference kernel' (say rebuno)"),
    (re.compile(r"/work/|/home/\w"), "a development machine's path"),
    (re.compile(r"\b(?:Store|KernelConfig|keel_actors)::\w+|src/\w+/\w+\.rs"), "an internal type, function or file"),
]


def test_user_docs_have_no_internal_references() -> None:
    pages = [REPO / "README.md", REPO / "deploy" / "README.md"]
    pages += [p for p in sorted((REPO / "docs").glob("*.md")) if p.name not in CONTRIBUTOR_PAGES]
    assert len(pages) > 8
    problems = []
    for page in pages:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for pattern, what in INTERNAL:
                if pattern.search(line):
                    problems.append(f"{page.relative_to(REPO)}:{number}: {what}: {line.strip()[:100]}")
    assert not problems, "\n".join(problems)
