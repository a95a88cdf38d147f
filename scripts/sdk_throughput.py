"""Executions per second of a simple rebuno SDK workload against a running Keel kernel.

An agent process with two local tools (each execution calls both, then completes) serves
executions that a client creates with `Client.run_until_complete`, at most CONCURRENCY at a
time. Prints executions/s and the p50/p99 of create-to-completed.

    REBUNO_URL=http://127.0.0.1:8080 python scripts/sdk_throughput.py [N=200] [CONCURRENCY=16]

Needs `pip install rebuno==0.4.8` (scripts/test.sh makes such a venv in target/sdk-venv).
"""

import asyncio
import os
import statistics
import subprocess
import sys
import time

from rebuno import Client

AGENT = """
import logging
from rebuno import Agent, tool

logging.basicConfig(level=logging.WARNING)
agent = Agent("throughput", consumer_id="throughput-1")

@tool("text.word_count")
def word_count(text: str) -> int:
    return len(text.split())

@tool("text.shout")
def shout(text: str) -> str:
    return text.upper()

async def handle(text: str):
    return {"words": await word_count(text=text), "loud": await shout(text=text)}

agent.run(handle)
"""


async def main(total: int, concurrency: int) -> None:
    agent = subprocess.Popen([sys.executable, "-c", AGENT], env=os.environ.copy())
    try:
        await asyncio.sleep(1.5)
        gate = asyncio.Semaphore(concurrency)
        latencies: list[float] = []
        async with Client(timeout=60.0) as client:

            async def one(index: int) -> None:
                async with gate:
                    started = time.perf_counter()
                    done = await client.run_until_complete("throughput", input={"text": f"run {index} of the bench"})
                    if done.status != "completed":
                        raise RuntimeError(f"execution {done.id} ended {done.status}")
                    latencies.append(time.perf_counter() - started)

            began = time.perf_counter()
            await asyncio.gather(*(one(index) for index in range(total)))
            elapsed = time.perf_counter() - began
        latencies.sort()
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(
            f"{total} executions in {elapsed:.2f} s: {total / elapsed:.1f} executions/s; "
            f"create-to-completed p50 {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
        )
    finally:
        agent.terminate()
        agent.wait(timeout=10)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    parallel = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    asyncio.run(main(count, parallel))
