"""A worker for `keel runner --exec`, used by tests/sdk/test_exec_runner.py.

It reads the job line on stdin and does what the job's ``arguments.mode`` says; it speaks
the worker protocol only (stdin line in, stdout line out) and imports nothing from the SDK.

Modes: ``echo`` (returns the job line, its environment and working directory), ``fail``,
``retry_once`` (retryable failure on attempt 1), ``crash_once`` (SIGKILLs itself on attempt
1), ``hang`` (records its pid and a grandchild's pid in ``arguments.pidfile``, notes SIGTERM
in ``arguments.termfile``, then sleeps until killed), ``flood`` (prints ``arguments.bytes``
bytes), ``silent_exit`` (stderr only, exit 3), ``garbage``, ``spin`` (burns CPU),
``allocate`` (allocates ``arguments.bytes``), ``keyed`` (logs ``KEEL_IDEMPOTENCY_KEY``, then
follows ``arguments.script``), ``sleep`` (sleeps ``arguments.seconds`` and
reports when it ran).

With ``--no-stdin PIDFILE`` it never reads stdin: it records its pid and sleeps until killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def answer(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def hang(args: dict) -> None:
    def on_term(signum, frame):  # noqa: ARG001
        with open(args["termfile"], "a") as f:
            f.write(f"{os.getpid()} SIGTERM\n")
        # Ignore it after noting it: the runner must follow up with SIGKILL.

    signal.signal(signal.SIGTERM, on_term)
    grandchild = subprocess.Popen(["sleep", "300"])  # noqa: S603,S607 - same process group
    with open(args["pidfile"] + ".tmp", "w") as f:
        json.dump({"worker": os.getpid(), "grandchild": grandchild.pid}, f)
    os.rename(args["pidfile"] + ".tmp", args["pidfile"])
    while True:
        time.sleep(1)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--no-stdin":
        with open(sys.argv[2], "w") as f:
            json.dump({"worker": os.getpid()}, f)
        while True:
            time.sleep(1)

    job = json.loads(sys.stdin.readline())
    args = job.get("arguments") or {}
    mode = args.get("mode")
    if mode == "echo":
        answer(
            success=True,
            data={
                "job": job,
                "env": sorted(os.environ),
                "cwd": os.getcwd(),
                "stdin_rest": sys.stdin.read(),
            },
            cost={"usd": 0.5},
        )
    elif mode == "fail":
        answer(success=False, error=args.get("error", "it broke"), data={"detail": 1})
    elif mode == "retry_once":
        if job["attempt"] == 1:
            answer(success=False, error="busy, try again", retryable=True)
        else:
            answer(success=True, data={"attempt": job["attempt"]})
    elif mode == "crash_once":
        if job["attempt"] == 1:
            sys.stderr.write("about to crash\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        answer(success=True, data={"attempt": job["attempt"]})
    elif mode == "hang":
        hang(args)
    elif mode == "flood":
        sys.stdout.write("x" * int(args["bytes"]))
        sys.stdout.flush()
        time.sleep(30)
    elif mode == "silent_exit":
        sys.stderr.write("noise\n" * 2000 + "something broke\n")
        sys.exit(3)
    elif mode == "garbage":
        print("hello, this is not JSON")
    elif mode == "spin":
        while True:
            pass
    elif mode == "allocate":
        block = bytearray(int(args["bytes"]))
        answer(success=True, data={"allocated": len(block)})
    elif mode == "keyed":
        # Notes the idempotency key it was given; the n-th call (over all attempts, runners and
        # re-runs) does what arguments.script[n] says: retry, hang or succeed.
        with open(args["log"], "a") as f:
            f.write(json.dumps({
                "key": os.environ.get("KEEL_IDEMPOTENCY_KEY"),
                "line_key": job.get("idempotency_key"),
                "step_id": job["step_id"],
                "attempt": job["attempt"],
                "pid": os.getpid(),
            }) + "\n")
        with open(args["log"]) as f:
            calls = len(f.readlines())
        script = args["script"]
        what = script[min(calls, len(script)) - 1]
        if what == "retry":
            answer(success=False, error="busy, try again", retryable=True)
        elif what == "hang":
            time.sleep(60)
        else:
            answer(success=True, data={"calls": calls})
    elif mode == "sleep":
        started = time.time()
        time.sleep(float(args["seconds"]))
        answer(success=True, data={"started": started, "ended": time.time()})
    else:
        answer(success=False, error=f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
