"""Crash takeover timing of a three-kernel cluster (issue 32, check 2), run by
scripts/cluster-failover.sh.

Each run: three `keel dev --cluster` kernels on one fresh PostgreSQL database; EXECUTIONS
executions created spread over them (pending: no agent consumes them); WORKERS clients send
signals to them round-robin through random live kernels (a steady load over all kernels; a
signal on a pending execution is written as `signal.received`). After WARMUP seconds one
kernel is killed with SIGKILL. The executions owned by it at that moment (per the database)
are its in-flight executions; one has progressed again when a signal sent to it after the kill
was acknowledged (2xx: its event is committed by the new owner). The run's time is the kill to
the last of them progressing. The victim is then restarted and the cluster left to balance
before the next run. Prints each run and the p50 and max over runs.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

KEEL = os.environ["KEEL"]
ADMIN = os.environ["KEEL_TEST_POSTGRES_URL"]
RUNS = int(os.environ.get("RUNS", "10"))
EXECUTIONS = int(os.environ.get("EXECUTIONS", "60"))
WORKERS = int(os.environ.get("WORKERS", "16"))
WARMUP = float(os.environ.get("WARMUP", "3"))
LIMIT = float(os.environ.get("LIMIT", "30"))
NODES = ("k1", "k2", "k3")
HEADERS = {"Content-Type": "application/json"}


def psql(url: str, sql: str) -> str:
    done = subprocess.run(
        ["psql", url, "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
        check=True, capture_output=True, text=True, timeout=30,
    )
    return done.stdout.strip()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, work: Path, db_url: str):
        self.work, self.db_url = work, db_url
        self.ports = {node: free_port() for node in NODES}
        self.procs: dict[str, subprocess.Popen] = {}

    def url(self, node: str) -> str:
        return f"http://127.0.0.1:{self.ports[node]}"

    def start(self, node: str) -> None:
        port = self.ports[node]
        log = open(self.work / f"{node}.log", "ab")  # noqa: SIM115 - lives with the process
        self.procs[node] = subprocess.Popen(
            [KEEL, "dev", "--port", str(port), "--data-dir", str(self.work / node),
             "--db-url", self.db_url, "--log-level", "warn", "--cluster",
             "--node-id", node, "--advertise-url", self.url(node)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )

    def kill(self, node: str) -> None:
        self.procs[node].send_signal(signal.SIGKILL)
        self.procs[node].wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    async def balanced(self, http: httpx.AsyncClient, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                views = [(await http.get(self.url(n) + "/v0/cluster")).json() for n in NODES]
                if all(
                    v["unowned"] == 0
                    and sum(1 for k in v["kernels"] if k["live"]) == len(NODES)
                    and all(k["partitions_owned"] >= v["partitions"] // len(NODES)
                            for k in v["kernels"] if k["live"])
                    for v in views
                ):
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError(f"the cluster did not balance within {timeout:.0f} s")


async def one_run(cluster: Cluster, db_url: str, http: httpx.AsyncClient, victim: str,
                  ids: list[str]) -> tuple[float, float, int]:
    live = list(NODES)
    progressed: dict[str, float] = {}
    killed_at: list[float] = []
    stop = asyncio.Event()
    counter = iter(range(10**12))

    async def worker() -> None:
        while not stop.is_set():
            n = next(counter)
            execution = ids[n % len(ids)]
            node = random.choice(live)
            sent = time.monotonic()
            try:
                r = await http.post(
                    f"{cluster.url(node)}/v0/executions/{execution}/signal",
                    json={"signal_type": "tick", "payload": {"n": n}}, headers=HEADERS,
                )
            except httpx.HTTPError:
                await asyncio.sleep(0.05)
                continue
            if r.status_code == 503:
                await asyncio.sleep(0.05)
            elif r.status_code // 100 == 2 and killed_at and sent > killed_at[0]:
                progressed.setdefault(execution, time.monotonic() - killed_at[0])

    workers = [asyncio.create_task(worker()) for _ in range(WORKERS)]
    try:
        await asyncio.sleep(WARMUP)
        owned = psql(db_url, "SELECT e.id FROM executions e JOIN partitions p ON p.id = e.partition "
                             f"WHERE p.owner = '{victim}'").split()
        inflight = set(owned) & set(ids)
        live.remove(victim)
        killed_at.append(time.monotonic())
        cluster.kill(victim)
        deadline = killed_at[0] + LIMIT
        while time.monotonic() < deadline and not inflight <= set(progressed):
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    times = [progressed[e] for e in inflight if e in progressed]
    if len(times) < len(inflight):
        raise TimeoutError(f"{len(inflight) - len(times)} of {len(inflight)} in-flight executions "
                           f"of {victim} did not progress within {LIMIT:.0f} s")
    return max(times), statistics.median(times), len(inflight)


async def main() -> None:
    name = f"keel_failover_{uuid.uuid4().hex[:12]}"
    psql(ADMIN, f"CREATE DATABASE {name}")
    db_url = urlunsplit(urlsplit(ADMIN)._replace(path=f"/{name}"))
    work = Path(tempfile.mkdtemp(prefix="keel-failover-"))
    cluster = Cluster(work, db_url)
    results: list[float] = []
    try:
        for node in NODES:
            cluster.start(node)
        async with httpx.AsyncClient(timeout=15, limits=httpx.Limits(max_connections=WORKERS * 2)) as http:
            await cluster.balanced(http)
            ids = []
            for n in range(EXECUTIONS):
                r = await http.post(cluster.url(NODES[n % len(NODES)]) + "/v0/executions",
                                    json={"agent_id": "failover-nobody", "input": {"n": n}},
                                    headers=HEADERS)
                r.raise_for_status()
                ids.append(r.json()["id"])
            print(f"kernel {KEEL}; {EXECUTIONS} executions, {WORKERS} signalling clients, "
                  f"{WARMUP:.0f} s of load before each kill", flush=True)
            for run in range(RUNS):
                victim = NODES[run % len(NODES)]
                slowest, median, count = await one_run(cluster, db_url, http, victim, ids)
                results.append(slowest)
                print(f"run {run + 1}: kill -9 {victim}: its {count} in-flight executions all "
                      f"progressed again {slowest:.2f} s after the kill (median execution "
                      f"{median:.2f} s)", flush=True)
                cluster.start(victim)
                await cluster.balanced(http)
    except BaseException:
        for node in NODES:
            log = work / f"{node}.log"
            if log.exists():
                print(f"--- {node} log (tail)\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]),
                      file=sys.stderr)
        raise
    finally:
        cluster.stop()
        psql(ADMIN, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        shutil.rmtree(work, ignore_errors=True)
    print(f"in-flight executions progress again after kill -9, over {len(results)} runs: "
          f"p50 {statistics.median(results):.2f} s, max {max(results):.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
