"""Builds the keel-sdk wheel, installs it into a private directory and imports it from there
(never from the source tree), and starts real kernels (KEEL_BIN) for the tests.

With `KEEL_TEST_BACKEND=postgres` (and `KEEL_TEST_POSTGRES_URL`) every kernel runs on a fresh
PostgreSQL database, as in the compatibility suite (tests/sdk/backend.py does the work)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
REPO = PACKAGE.parent.parent
BUILD = Path(tempfile.mkdtemp(prefix="keel-sdk-wheel-"))


def _load_backend():  # type: ignore[no-untyped-def]
    """tests/sdk/backend.py of this repository, under a name of its own."""
    spec = importlib.util.spec_from_file_location(
        "keel_test_backend", REPO / "tests" / "sdk" / "backend.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


backend = _load_backend()
SITE = BUILD / "site"


def pytest_configure(config: pytest.Config) -> None:
    # The wheel, as a user would get it, without network (no build isolation, no dependencies:
    # httpx is already installed next to pytest).
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(BUILD / "dist"), str(PACKAGE)],
        check=True, timeout=120,
    )
    wheels = list((BUILD / "dist").glob("keel_sdk-*.whl"))
    assert len(wheels) == 1, wheels
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(SITE),
         str(wheels[0])],
        check=True, timeout=120,
    )
    sys.path.insert(0, str(SITE))
    os.environ["KEEL_SDK_SITE"] = str(SITE)


def pytest_report_header(config: pytest.Config) -> str:  # noqa: ARG001
    return f"keel backend: {backend.backend()}"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(BUILD, ignore_errors=True)


def keel_bin() -> Path:
    path = Path(os.environ.get("KEEL_BIN", "target/debug/keel"))
    return path if path.is_absolute() else REPO / path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Kernel:
    def __init__(self, workdir: Path, args: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "kernel.log"
        (workdir / "data").mkdir(parents=True)
        self.database = backend.new_database()
        store = ["--db-url", self.database.url] if self.database is not None else []
        argv = [str(keel_bin()), "dev", "--port", str(self.port), "--data-dir",
                str(workdir / "data"), "--agent-timeout", "1s", *store, *args]
        self.proc = subprocess.Popen(argv, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        try:
            wait_until("kernel health", self._healthy)
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"kernel exited:\n{self.log.read_text()[-3000:]}")
        try:
            return httpx.get(self.url + "/v0/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.database is not None:
            self.database.drop()


@pytest.fixture
def kernels(tmp_path: Path) -> Iterator[list[Kernel]]:
    started: list[Kernel] = []
    yield started
    for kernel in started:
        kernel.stop()


@pytest.fixture
def start_kernel(tmp_path: Path, kernels: list[Kernel]):  # type: ignore[no-untyped-def]
    def start(*args: str) -> Kernel:
        kernel = Kernel(tmp_path / f"kernel{len(kernels)}", list(args))
        kernels.append(kernel)
        return kernel

    return start


@pytest.fixture
def agent_proc(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    """Starts tests/agent_app.py (importing keel_sdk from the installed wheel)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(
        kernel: Kernel, agent_id: str, script: str = "agent_app.py", name: str = ""
    ) -> Path:
        name = name or agent_id
        markers = tmp_path / f"{name}.markers"
        env = dict(os.environ, PYTHONPATH=str(SITE), PYTHONUNBUFFERED="1")
        log = (tmp_path / f"{name}.log").open("w")
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / script), kernel.url, agent_id, str(markers)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        ))
        start.procs = procs  # type: ignore[attr-defined]
        return markers

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
