"""Fixtures for the SDK compatibility scenarios.

`sandbox` gives each test its own temp directory in which it starts kernels (`keel dev` on a
free 127.0.0.1 port, fresh data dir, `--agent-timeout 1s`), agents and runners; all of them
are stopped after the test. `kernel` is a sandbox kernel with the permissive dev policy.
With `KEEL_TEST_BACKEND=postgres` every kernel runs on a fresh PostgreSQL database instead of
SQLite (`backend.py`).
When a test fails, the tails of every log it produced are attached to the report.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest

import backend
from harness import Kernel, Sandbox, tail

if sys.version_info < (3, 11):  # rebuno 0.4.8 imports enum.StrEnum
    raise RuntimeError("the SDK compatibility tests need Python >= 3.11")

# Hard ceiling per test; the scenarios bound their own waits well below it.
TEST_DEADLINE_S = 60

_SANDBOXES = pytest.StashKey[Sandbox]()


def pytest_report_header(config: pytest.Config) -> str:  # noqa: ARG001
    if backend.backend() == "cluster":
        return "keel backend: cluster (three --cluster kernels on a fresh database per kernel)"
    if backend.backend() == "postgres":
        return "keel backend: postgres (a fresh keel_sdk_<uuid> database per kernel)"
    return "keel backend: sqlite (a fresh data directory per kernel)"


@pytest.fixture
def sandbox(request: pytest.FixtureRequest, tmp_path) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path)
    request.node.stash[_SANDBOXES] = box
    try:
        yield box
    finally:
        box.close()


@pytest.fixture
def kernel(sandbox: Sandbox) -> Kernel:
    return sandbox.kernel()


@pytest.fixture(autouse=True)
def _deadline() -> Iterator[None]:
    def expired(signum, frame):  # noqa: ARG001
        raise TimeoutError(f"test exceeded its {TEST_DEADLINE_S}s deadline")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_DEADLINE_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    box = item.stash.get(_SANDBOXES, None)
    if box is not None and report.failed and call.when in ("setup", "call"):
        for title, path in box.logs():
            report.sections.append((title, tail(path)))
    return report
