"""Process and polling helpers for the SDK compatibility scenarios.

The kernel, agents and runners run as real processes: the kernel is the `keel` binary
(`KEEL_BIN`), agents and runners are the scripts in `agents/`, driven by the real
rebuno==0.4.8 SDK. Every wait here has a deadline; nothing waits forever.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import httpx

import backend

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
AGENTS = HERE / "agents"

T = TypeVar("T")


def keel_bin() -> Path:
    path = Path(os.environ.get("KEEL_BIN", "target/debug/keel"))
    if not path.is_absolute():
        path = REPO / path
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tail(path: Path, lines: int = 80) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(text.splitlines()[-lines:])


class Abort(Exception):
    """Raised by a probe to stop waiting at once (e.g. the process it watches died)."""


def wait_until(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = 10.0,
    interval: float = 0.05,
) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except Abort:
            raise
        except Exception as e:  # noqa: BLE001 - keep polling, report the last one
            last_error = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


def run(coro: Coroutine[Any, Any, T], timeout: float = 15.0) -> T:
    """Run an SDK coroutine to completion with a hard deadline."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class Proc:
    """A child process whose stdout+stderr go to a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str]):
        self.name = name
        self.argv = argv
        self.log = log
        self._log_file = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> None:
        rx = re.compile(pattern)

        def probe() -> bool:
            if not self.alive():
                raise Abort(f"{self.name} exited with {self.popen.returncode}")
            return bool(rx.search(self.log_text()))

        wait_until(f"{self.name} to log /{pattern}/", probe, timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=5)

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        self._log_file.close()


class Kernel:
    """`keel dev` on a free 127.0.0.1 port with its own data directory."""

    def __init__(
        self, workdir: Path, extra_args: list[str] | None = None, agent_timeout: str = "1s"
    ):
        self.workdir = workdir
        self.extra_args = extra_args or []
        self.agent_timeout = agent_timeout
        self.proc: Proc | None = None
        self.port = 0
        self.log = workdir / "kernel.log"
        # PostgreSQL when KEEL_TEST_BACKEND=postgres (kept across restarts), else None.
        self.database = backend.new_database()
        # Cluster mode: the ports of the other kernels and their processes.
        self.cluster = backend.backend() == "cluster"
        self.ports: list[int] = []
        self.peers: list[Proc] = []
        self._next = 0

    @property
    def url(self) -> str:
        # Cluster mode: each use names the next kernel, spreading agents, runners and clients.
        if self.ports:
            self._next = (self._next + 1) % len(self.ports)
            return f"http://127.0.0.1:{self.ports[self._next]}"
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        for attempt in range(3):  # the free port may be taken before the kernel binds it
            self.port = free_port()
            self.ports = []
            try:
                self._launch(timeout)
                return
            except (TimeoutError, Abort):
                for peer in self.peers:
                    peer.stop(grace=1)
                self.proc.stop(grace=1)
                if attempt == 2 or "in use" not in tail(self.log, 20).lower():
                    raise

    def restart(self, timeout: float = 20.0) -> None:
        """Crash the kernel (SIGKILL) and start it again on the same port and data dir."""
        assert self.proc is not None
        for proc in [self.proc, *self.peers]:
            proc.kill()
            proc.stop()
        self._launch(timeout)

    def _launch(self, timeout: float) -> None:
        binary = keel_bin()
        if not binary.exists():
            raise FileNotFoundError(
                f"kernel binary {binary} not found: run `cargo build --bins` or set KEEL_BIN"
            )
        data_dir = self.workdir / "data"
        data_dir.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        argv = [
            str(binary), "dev",
            "--port", str(self.port),
            "--data-dir", str(data_dir),
            "--agent-timeout", self.agent_timeout,
            *(["--db-url", self.database.url] if self.database else []),
            *self.extra_args,
        ]
        if not self.cluster:
            self.proc = Proc("kernel", argv, self.log, env)
            wait_until("kernel /v0/health", self._healthy, timeout)
            return
        # Three kernels on one database; the first keeps `self.port` and `self.log`.
        if len(self.ports) != backend.CLUSTER_SIZE:
            self.ports = [self.port] + [free_port() for _ in range(backend.CLUSTER_SIZE - 1)]
        procs = []
        for n, port in enumerate(self.ports):
            node_dir = data_dir if n == 0 else self.workdir / f"data-{n}"
            node_dir.mkdir(exist_ok=True)
            node_argv = list(argv)
            node_argv[node_argv.index("--port") + 1] = str(port)
            node_argv[node_argv.index("--data-dir") + 1] = str(node_dir)
            node_argv += ["--cluster", "--node-id", f"k{n}",
                          "--advertise-url", f"http://127.0.0.1:{port}"]
            log = self.log if n == 0 else self.workdir / f"kernel-{n}.log"
            procs.append(Proc(f"kernel-{n}", node_argv, log, env))
        self.proc, self.peers = procs[0], procs[1:]
        wait_until("every kernel of the cluster to own its partitions", self._balanced, timeout)

    def _balanced(self) -> bool:
        for proc in [self.proc, *self.peers]:
            if not proc.alive():
                raise Abort(f"{proc.name} exited with {proc.popen.returncode}:\n{tail(proc.log, 30)}")
        # A kernel started with --bearer-token answers /v0/cluster only with it.
        args = self.extra_args
        token = args[args.index("--bearer-token") + 1] if "--bearer-token" in args else ""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            views = [
                httpx.get(f"http://127.0.0.1:{port}/v0/cluster", headers=headers, timeout=1).json()
                for port in self.ports
            ]
        except (httpx.HTTPError, ValueError):
            return False
        # Balanced, not merely owned: a first kernel holds every partition until it sees the
        # others live, and a scenario started then would see its executions move mid-run.
        def settled(view: dict) -> bool:
            live = [k for k in view.get("kernels", []) if k.get("live")]
            least = view.get("partitions", 0) // len(self.ports)
            return (
                view.get("unowned") == 0
                and len(live) == len(self.ports)
                and all(k.get("partitions_owned", 0) >= least for k in live)
            )

        return all(settled(view) for view in views)

    def log_text(self) -> str:
        """Everything the kernel logged (in the cluster mode, all three kernels)."""
        return "\n".join(proc.log_text() for proc in [self.proc, *self.peers] if proc)

    def _healthy(self) -> bool:
        assert self.proc is not None
        if not self.proc.alive():
            raise Abort(
                f"kernel exited with {self.proc.popen.returncode}:\n{tail(self.log, 30)}"
            )
        try:
            r = httpx.get(self.url + "/v0/health", timeout=1)
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    def stop(self) -> None:
        for proc in self.peers:
            proc.stop(grace=5)
        if self.proc is not None:
            self.proc.stop(grace=5)
        if self.database is not None:
            self.database.drop()

    # --- small HTTP helpers (plain JSON, independent of the SDK) -------------------

    def get(self, path: str, **params: Any) -> Any:
        r = httpx.get(self.url + path, params=params or None, timeout=5)
        r.raise_for_status()
        return r.json()

    def events(self, execution_id: str) -> list[dict[str, Any]]:
        return self.get(f"/v0/executions/{execution_id}/events", limit=1000)["events"]

    def event_types(self, execution_id: str) -> list[str]:
        return [e["type"] for e in self.events(execution_id)]

    def status(self, execution_id: str) -> str:
        return self.get(f"/v0/executions/{execution_id}")["status"]

    def wait_status(self, execution_id: str, *statuses: str, timeout: float = 10.0) -> dict:
        def probe() -> dict | None:
            body = self.get(f"/v0/executions/{execution_id}")
            return body if body["status"] in statuses else None

        return wait_until(f"execution {execution_id} to be {'/'.join(statuses)}", probe, timeout)

    def wait_event(
        self, execution_id: str, event_type: str, timeout: float = 10.0, count: int = 1
    ) -> list[dict[str, Any]]:
        def probe() -> list[dict[str, Any]] | None:
            found = [e for e in self.events(execution_id) if e["type"] == event_type]
            return found if len(found) >= count else None

        return wait_until(f"{count}x {event_type} on {execution_id}", probe, timeout)


class Sandbox:
    """Everything one scenario starts; torn down in reverse order."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.kernels: list[Kernel] = []
        self.procs: list[Proc] = []

    def kernel(self, *extra_args: str, agent_timeout: str = "1s") -> Kernel:
        k = Kernel(self.workdir / f"kernel{len(self.kernels)}", list(extra_args), agent_timeout)
        k.workdir.mkdir()
        self.kernels.append(k)
        k.start()
        return k

    def spawn(
        self, kernel: Kernel, name: str, script: Path, args: list[str], api_key: str = ""
    ) -> Proc:
        """Runs a Python script with REBUNO_URL pointing at `kernel`."""
        env = dict(os.environ)
        env["REBUNO_URL"] = kernel.url
        env.pop("REBUNO_API_KEY", None)
        if api_key:
            env["REBUNO_API_KEY"] = api_key
        env["PYTHONUNBUFFERED"] = "1"
        argv = [sys.executable, str(script), *args]
        proc = Proc(name, argv, self.workdir / f"{name}.log", env)
        self.procs.append(proc)
        return proc

    def agent(
        self,
        kernel: Kernel,
        agent_id: str,
        consumer_id: str,
        *,
        hang: bool = False,
        api_key: str = "",
    ) -> AgentProc:
        markers = self.workdir / f"{consumer_id}.markers"
        args = ["--agent-id", agent_id, "--consumer-id", consumer_id, "--markers", str(markers)]
        if hang:
            args.append("--hang")
        proc = self.spawn(kernel, consumer_id, AGENTS / "agent.py", args, api_key)
        return AgentProc(proc, consumer_id, markers)

    def runner(
        self,
        kernel: Kernel,
        runner_id: str,
        consumer_id: str,
        *,
        hang: bool = False,
        api_key: str = "",
    ) -> AgentProc:
        markers = self.workdir / f"{consumer_id}.markers"
        args = ["--runner-id", runner_id, "--consumer-id", consumer_id, "--markers", str(markers)]
        if hang:
            args.append("--hang")
        proc = self.spawn(kernel, consumer_id, AGENTS / "runner.py", args, api_key)
        return AgentProc(proc, consumer_id, markers)

    def logs(self) -> list[tuple[str, Path]]:
        peers = [(f"{k.workdir.name} {p.name} log", p.log) for k in self.kernels for p in k.peers]
        return [(f"{k.workdir.name} log", k.log) for k in self.kernels] + peers + [
            (f"{p.name} log", p.log) for p in self.procs
        ]

    def close(self) -> None:
        for p in reversed(self.procs):
            p.stop(grace=1.5)
        for k in reversed(self.kernels):
            k.stop()


class AgentProc:
    """An agent or runner process plus the markers its handlers write."""

    def __init__(self, proc: Proc, consumer_id: str, markers: Path):
        self.proc = proc
        self.consumer_id = consumer_id
        self.markers_path = markers

    def markers(self, event: str | None = None) -> list[dict[str, Any]]:
        try:
            lines = self.markers_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        found = [json.loads(line) for line in lines if line.strip()]
        return [m for m in found if event is None or m["event"] == event]

    def wait_marker(self, event: str, execution_id: str | None = None, timeout: float = 10.0):
        def probe() -> dict | None:
            for m in self.markers(event):
                if execution_id is None or m.get("execution_id") == execution_id:
                    return m
            return None

        return wait_until(f"{self.consumer_id} marker {event} {execution_id or ''}", probe, timeout)

    def wait_connected(self, stream: str = "agents", timeout: float = 10.0) -> None:
        """Wait until the SDK's SSE request got its 200 (httpx logs the status line)."""
        self.proc.wait_for_log(rf'GET \S+/v0/{stream}/stream\S* "HTTP/1\.1 200', timeout)
