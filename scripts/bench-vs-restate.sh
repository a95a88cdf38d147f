#!/usr/bin/env bash
# Reproduces the T1–T8 table of docs/benchmarks.md (issue 8): Keel and Restate doing the same
# job in the same sitting, ROUNDS rounds, median of the rounds, Keel/Restate ratios.
#
#   cargo build --profile production --bin keel
#   bash scripts/bench-vs-restate.sh
#   KEEL_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test ROUNDS=3 bash scripts/bench-vs-restate.sh
#
# Each round runs ../shared/bench/restate/run.sh (Restate server + a K-step TypeScript service,
# installed from npm; C=1 and C=CONC for DUR s each), then, each on a fresh `keel dev` kernel
# (127.0.0.1, free port, fresh data directory, SQLite synchronous=FULL):
#   T1/T2  keel bench run --local-steps K --concurrency CONC --duration DUR s --warmup 3s
#   T3     the same with --concurrency 1
#   floor  keel bench floor --local-steps K --concurrency CONC --duration 5s --sync-dir <its work dir>
#   T4     keel bench create --concurrency CONC --duration CREATE_DUR s
#   T5/T6  keel bench blocked --executions PARK_N
#   T7     keel bench restart --executions RESTART_N   (starts and kill -9s its own kernel)
#   T8     T1 on PostgreSQL (a database keel_bench_<uuid>, dropped after), when
#          KEEL_TEST_POSTGRES_URL is set (needs psql)
# Every report is one JSON line, appended to RESULTS with the system, round and test added.
#
# Environment (defaults in brackets):
#   KEEL [target/production/keel]  ROUNDS [3]  K [5]  CONC [64]  DUR [15]  CREATE_DUR [10]
#   PARK_N [100000]  RESTART_N [100000]
#   RESTATE [1]          0 skips the Restate side (the ratios are then left out)
#   RESTATE_DIR          the peer's scripts [../shared/bench/restate]
#   RESTATE_PARK_N [0]   >0 also runs the peer's park/restart probe once (after the rounds;
#                        it waits 70 s for Restate to suspend the parked invocations)
#   RESULTS              JSON lines file to keep [a temporary file, removed at exit; the
#                        summary prints each round's main numbers after the medians]
#   STEP_TIMEOUT [900]   seconds any one step may take
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
keel=$(realpath "${KEEL:-target/production/keel}")
rounds=${ROUNDS:-3}
steps=${K:-5}
conc=${CONC:-64}
dur=${DUR:-15}
create_dur=${CREATE_DUR:-10}
park_n=${PARK_N:-100000}
restart_n=${RESTART_N:-100000}
restate=${RESTATE:-1}
restate_dir=${RESTATE_DIR:-../shared/bench/restate}
restate_park_n=${RESTATE_PARK_N:-0}
step_timeout=${STEP_TIMEOUT:-900}
work=$(mktemp -d)
results=${RESULTS:-$work/results.jsonl}
kernel_pid=""
database=""

cleanup() {
    if [ -n "$kernel_pid" ]; then kill -TERM "$kernel_pid" 2>/dev/null || true; wait "$kernel_pid" 2>/dev/null || true; fi
    if [ -n "$database" ]; then psql "$KEEL_TEST_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

[ -x "$keel" ] || { echo "no kernel binary at $keel (cargo build --profile production --bin keel)" >&2; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Appends a JSON report line with system, round and test added.
record() { # system round test json
    python3 -c 'import json, sys
r = json.loads(sys.argv[4]); r.update(system=sys.argv[1], round=int(sys.argv[2]), test=sys.argv[3])
print(json.dumps(r))' "$@" >>"$results"
}

# Starts `keel dev` on a fresh data directory (and --db-url if given); sets kernel_pid, url.
start_kernel() {
    local port data=$work/data-$RANDOM
    port=$(free_port)
    rm -rf "$data"
    "$keel" dev --bind 127.0.0.1 --port "$port" --data-dir "$data" --log-level warn ${1:+--db-url "$1"} \
        >>"$work/kernel.log" 2>&1 &
    kernel_pid=$!
    url=http://127.0.0.1:$port
    for _ in $(seq 1 400); do
        curl -fsS "$url/v0/ready" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "keel dev did not become ready; log:" >&2; tail -20 "$work/kernel.log" >&2; exit 1
}

stop_kernel() {
    kill -TERM "$kernel_pid" 2>/dev/null || true
    wait "$kernel_pid" 2>/dev/null || true
    kernel_pid=""
}

# Runs one `keel bench` scenario against a fresh kernel and records its report.
keel_step() { # round test db_url scenario-args...
    local round=$1 test=$2 db_url=$3 out
    shift 3
    start_kernel "$db_url"
    echo "-- round $round $test: keel bench $*" >&2
    out=$(timeout "$step_timeout" "$keel" bench "$@" --url "$url" --pid "$kernel_pid" --output json | tail -1) || true
    stop_kernel
    if [ -n "$out" ]; then record keel "$round" "$test" "$out"; else echo "   (no report)" >&2; fi
}

# Runs the Restate peer and records one line per concurrency of its table.
restate_step() { # round
    local round=$1 out
    echo "-- round $round: Restate (DUR=$dur CONCS=\"1 $conc\" K=$steps)" >&2
    out=$(DUR=$dur CONCS="1 $conc" K=$steps CRASH=0 PARK_N=0 timeout "$step_timeout" bash "$restate_dir/run.sh") || {
        echo "$out" >&2; echo "the Restate peer failed" >&2; return 1; }
    echo "$out" | sed 's/^/   /' >&2
    # | C | completed | inv/s | p50 | p90 | p99 | max | errors | server CPU | service CPU | loadgen CPU | RSS (peak) | service RSS |
    echo "$out" | python3 -c 'import json, sys
for line in sys.stdin:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 13 or not cells[0].isdigit():
        continue
    num = lambda s: float(s) if s not in ("-", "") else None
    server, service = num(cells[8]), num(cells[9])
    print(json.dumps({"scenario": "run", "concurrency": int(cells[0]), "completed": int(cells[1]),
        "throughput_per_s": num(cells[2]), "p50_ms": num(cells[3]), "p90_ms": num(cells[4]),
        "p99_ms": num(cells[5]), "errors": int(cells[7]),
        "server_cpu_ms_per_execution": server, "service_cpu_ms_per_execution": service,
        "cpu_ms_per_execution": (server or 0) + (service or 0),
        "loadgen_cpu_ms_per_execution": num(cells[10]), "server_rss_mb": cells[11]}))' |
    while read -r line; do
        c=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["concurrency"])' "$line")
        record restate "$round" "run-c$c" "$line"
    done
}

echo "kernel: $keel ($("$keel" --version)); $(nproc) cores; $rounds rounds; K=$steps C=$conc DUR=${dur}s" >&2
for round in $(seq 1 "$rounds"); do
    if [ "$restate" = 1 ]; then restate_step "$round"; fi
    keel_step "$round" t1 "" run --local-steps "$steps" --concurrency "$conc" \
        --executions 1000000000 --duration "${dur}s" --warmup 3s
    keel_step "$round" t3 "" run --local-steps "$steps" --concurrency 1 \
        --executions 1000000000 --duration "${dur}s" --warmup 3s
    keel_step "$round" floor "" floor --local-steps "$steps" --concurrency "$conc" --duration 5s \
        --sync-dir "$work"
    keel_step "$round" t4 "" create --concurrency "$conc" --duration "${create_dur}s"
    keel_step "$round" t5 "" blocked --executions "$park_n" --concurrency "$conc"
    echo "-- round $round t7: keel bench restart --executions $restart_n" >&2
    out=$(timeout "$step_timeout" "$keel" bench restart --kernel-bin "$keel" --executions "$restart_n" \
        --concurrency "$conc" --output json | tail -1) || true
    [ -n "$out" ] && record keel "$round" t7 "$out"
    if [ -n "${KEEL_TEST_POSTGRES_URL:-}" ]; then
        database=keel_bench_$(python3 -c 'import uuid; print(uuid.uuid4().hex)')
        psql "$KEEL_TEST_POSTGRES_URL" -qc "CREATE DATABASE $database"
        keel_step "$round" t8 "${KEEL_TEST_POSTGRES_URL%/*}/$database" run --local-steps "$steps" \
            --concurrency "$conc" --executions 1000000000 --duration "${dur}s" --warmup 3s
        psql "$KEEL_TEST_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)"
        database=""
    fi
done
if [ "$restate" = 1 ] && [ "$restate_park_n" -gt 0 ]; then
    echo "-- Restate park/restart probe (PARK_N=$restate_park_n)" >&2
    out=$(PARK_N=$restate_park_n CRASH=0 CONCS="" timeout "$step_timeout" bash "$restate_dir/run.sh") || true
    echo "$out" | sed 's/^/   /' >&2
    echo "$out" | python3 -c 'import json, re, sys
text = sys.stdin.read()
park = re.search(r"per invocation server=(-?\d+) KiB service=(-?\d+) KiB", text)
restart = re.search(r"healthy_after_s=([\d.]+) first_invocation_done_after_s=([\d.]+)", text)
print(json.dumps({"scenario": "park",
    "kib_per_parked": (int(park.group(1)) + int(park.group(2))) if park else None,
    "ready_ms": float(restart.group(1)) * 1000 if restart else None,
    "first_execution_ms": float(restart.group(2)) * 1000 if restart else None}))' |
    while read -r line; do record restate 1 park "$line"; done
fi

echo "results: $results" >&2
python3 - "$results" "$steps" "$conc" "$park_n" "$restart_n" <<'EOF'
import json, statistics, sys
path, k, c, park_n, restart_n = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
rows = [json.loads(line) for line in open(path)]
def med(system, test, get):
    values = []
    for r in rows:
        if r["system"] == system and r["test"] == test:
            try:
                v = get(r)
            except (KeyError, TypeError):
                v = None
            if v is not None:
                values.append(v)
    return statistics.median(values) if values else None
def fmt(v, unit="", digits=1):
    return "—" if v is None else f"{v:,.{digits}f}{unit}".replace(",", " ")
def ratio(a, b, inverse=False):
    if a is None or b is None or a == 0 or b == 0:
        return "—"
    return f"{(b / a if inverse else a / b):.2f}×"
rate = lambda r: r["throughput_per_s"]
t1, r64 = med("keel", "t1", rate), med("restate", f"run-c{c}", rate)
t3, r1 = med("keel", "t3", rate), med("restate", "run-c1", rate)
cpu_k, cpu_r = med("keel", "t1", lambda r: r["kernel"]["cpu_ms_per_execution"]), med("restate", f"run-c{c}", lambda r: r["cpu_ms_per_execution"])
gen_k, gen_r = med("keel", "t1", lambda r: r["bench"]["cpu_ms_per_execution"]), med("restate", f"run-c{c}", lambda r: r["loadgen_cpu_ms_per_execution"])
p50_k, p50_r = med("keel", "t3", lambda r: r["latency"]["execution"]["p50_ms"]), med("restate", "run-c1", lambda r: r["p50_ms"])
ip50, ip99 = med("keel", "t3", lambda r: r["latency"]["intent"]["p50_ms"]), med("keel", "t3", lambda r: r["latency"]["intent"]["p99_ms"])
t4 = med("keel", "t4", rate)
t5 = med("keel", "t5", lambda r: r["memory"]["rss_per_blocked_bytes"])
t6 = med("keel", "t5", lambda r: r["memory"]["completed_over_baseline_kib"])
ready, first = med("keel", "t7", lambda r: r["ready_ms"]), med("keel", "t7", lambda r: r["first_execution_ms"])
rss7 = med("keel", "t7", lambda r: r["memory"]["at_ready_rss_kib"])
t8 = med("keel", "t8", rate)
floor_ms = med("keel", "floor", lambda r: r["floor"]["execution_ms"])
floor_rtt = med("keel", "floor", lambda r: r["floor"]["round_trip_p50_ms"])
floor_sync = med("keel", "floor", lambda r: r["floor"]["sync_p50_ms"])
floor_cpu = med("keel", "floor", lambda r: r["floor"]["kernel_cpu_ms_per_execution"])
park_r = med("restate", "park", lambda r: r["kib_per_parked"])
ready_r, first_r = med("restate", "park", lambda r: r["ready_ms"]), med("restate", "park", lambda r: r["first_execution_ms"])
n = len({r["round"] for r in rows if r["system"] == "keel"})
print(f"\nMedian of {n} round(s); K={k} local steps; Keel on SQLite synchronous=FULL unless noted.\n")
print("| # | what | Keel | Restate | Keel vs Restate | target |")
print("|---|---|---|---|---|---|")
print(f"| T1 | C={c} executions/s | {fmt(t1)} | {fmt(r64)} | {ratio(t1, r64)} | ≥ 5× |")
print(f"| T2 | kernel CPU ms per execution (T1) | {fmt(cpu_k, ' ms', 2)} | {fmt(cpu_r, ' ms', 2)} (server + service) | {ratio(cpu_k, cpu_r, True)} less | ≤ 0.5 ms |")
print(f"| T2 | load generator CPU ms per execution (T1) | {fmt(gen_k, ' ms', 2)} | {fmt(gen_r, ' ms', 2)} | | |")
print(f"| T3 | C=1 executions/s | {fmt(t3)} | {fmt(r1)} | {ratio(t3, r1)} | |")
print(f"| T3 | C=1 execution p50 | {fmt(p50_k, ' ms', 2)} | {fmt(p50_r, ' ms', 2)} | {ratio(p50_k, p50_r)} of Restate's | ≤ 0.33× |")
print(f"| T3 | C=1 intent round trip p50 / p99 | {fmt(ip50, ' ms', 2)} / {fmt(ip99, ' ms', 2)} | — | | ≤ 0.8 / ≤ 3 ms |")
print(f"| T4 | creates/s, no agent, C={c} | {fmt(t4)} | — | | ≥ 10 000 |")
print(f"| T5 | RSS per blocked execution (N={park_n}) | {fmt(None if t5 is None else t5 / 1024, ' KiB', 2)} | {fmt(park_r, ' KiB', 0)} | | ≤ 2 KiB |")
print(f"| T6 | RSS after they completed, over the idle baseline | {fmt(None if t6 is None else t6 / 1024, ' MiB')} | — | | ≤ 32 MiB |")
print(f"| T7 | kill -9 with {restart_n} non-terminal → /v0/ready | {fmt(ready, ' ms', 0)} | {fmt(ready_r, ' ms', 0)} | | ≤ 1 s |")
print(f"| T7 | … → first new execution completed | {fmt(first, ' ms', 0)} | {fmt(first_r, ' ms', 0)} | | ≤ 1 s |")
print(f"| T7 | RSS at ready after the restart | {fmt(None if rss7 is None else rss7 / 1024, ' MiB')} | — | | |")
print(f"| T8 | T1 on PostgreSQL, executions/s | {fmt(t8)} | {fmt(r64)} | {ratio(t8, r64)} | ≥ 3× |")
third = None if p50_r is None else p50_r / 3
print(f"| floor | C=1 execution at least: {fmt(floor_rtt, ' ms', 3)} round trip, {fmt(floor_sync, ' ms', 3)} write + fsync | {fmt(floor_ms, ' ms', 2)} | {fmt(p50_r, ' ms', 2)} | {ratio(floor_ms, p50_r)} of Restate's | T3 asks ≤ {fmt(third, ' ms', 2)} |")
print(f"| floor | kernel CPU of an execution's requests, doing nothing (T1) | {fmt(floor_cpu, ' ms', 3)} | — | | T2 asks ≤ 0.5 ms |")
def each(system, test, get, digits=1):
    values = []
    for r in sorted((r for r in rows if r["system"] == system and r["test"] == test), key=lambda r: r["round"]):
        try:
            values.append(fmt(get(r), digits=digits))
        except (KeyError, TypeError):
            values.append("—")
    return " / ".join(values) or "—"
print("\nEach round (in round order):")
print(f"- T1 executions/s: Keel {each('keel', 't1', rate)}; Restate {each('restate', f'run-c{c}', rate)}")
print(f"- T2 kernel CPU ms per execution: {each('keel', 't1', lambda r: r['kernel']['cpu_ms_per_execution'], 2)}")
print(f"- T3 execution p50 ms: Keel {each('keel', 't3', lambda r: r['latency']['execution']['p50_ms'], 2)}; Restate {each('restate', 'run-c1', lambda r: r['p50_ms'], 2)}")
print(f"- T3 intent p50 / p99 ms: {each('keel', 't3', lambda r: r['latency']['intent']['p50_ms'], 2)} and {each('keel', 't3', lambda r: r['latency']['intent']['p99_ms'], 2)}")
print(f"- T4 creates/s: {each('keel', 't4', rate)}")
print(f"- T7 ready ms: {each('keel', 't7', lambda r: r['ready_ms'], 0)}")
print(f"- T8 executions/s: {each('keel', 't8', rate)}")
EOF
