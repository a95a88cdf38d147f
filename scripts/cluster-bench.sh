#!/usr/bin/env bash
# T8 (the K=5, C=64 job on PostgreSQL) against 1, 2 and 3 cluster kernels on one fresh
# PostgreSQL database each, and what the cluster costs PostgreSQL. For each kernel count N:
#
#   1. starts N `keel dev --cluster` kernels on a fresh database keel_cbench_<random>, waits
#      until every partition has its final owner;
#   2. idle, IDLE seconds: transactions/s and `nodes`/`partitions` row updates/s per kernel;
#   3. under load: `keel bench run --local-steps STEPS --concurrency CONC --url A,B,C --pid
#      P1,P2,P3` (agents and creations spread over the kernels), with the same counters plus
#      PostgreSQL's CPU: the utime+stime (/proc/PID/stat) of the server processes serving this
#      database (pg_stat_activity), before and after, per execution;
#   4. group commits (keel_store_commit_seconds_count of every kernel's /metrics) and
#      transactions per group commit.
#
# Statements: with pg_stat_statements loaded (shared_preload_libraries, a server restart) the
# script also prints calls per group commit and the lease/membership calls per second from it;
# without it, it says so and counts transactions (pg_stat_database.xact_commit + xact_rollback:
# every statement the kernel sends outside a transaction block is one) and row updates of the
# lease tables (pg_stat_user_tables) instead.
#
#   cargo build --profile production --bin keel
#   KEEL_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test bash scripts/cluster-bench.sh
#
# Environment:
#   KEEL                    kernel binary (default target/production/keel, else target/release/keel)
#   KEEL_TEST_POSTGRES_URL  admin URL of the PostgreSQL server (needed; needs psql); the
#                           databases are dropped at the end
#   NODES                   kernel counts to run (default "single 1 2 3"; `single` is one kernel
#                           without --cluster, today's one-kernel mode, for the same-sitting
#                           comparison with one cluster kernel)
#   DUR, WARMUP             measured and warm-up seconds of the bench (default 15 and 3)
#   CONC, STEPS             agents and local steps per execution (default 64 and 5)
#   IDLE                    seconds of the idle measurement (default 10)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
admin=${KEEL_TEST_POSTGRES_URL:?set KEEL_TEST_POSTGRES_URL to a PostgreSQL admin URL}
keel=${KEEL:-}
if [ -z "$keel" ]; then
    keel=target/production/keel
    [ -x "$keel" ] || keel=target/release/keel
fi
[ -x "$keel" ] || { echo "no kernel binary at $keel (set KEEL)" >&2; exit 1; }
nodes_list=${NODES:-"single 1 2 3"}
dur=${DUR:-15}
warmup=${WARMUP:-3}
conc=${CONC:-64}
steps=${STEPS:-5}
idle=${IDLE:-10}
work=$(mktemp -d)
pids=()
database=""

stop_kernels() {
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
drop_database() {
    if [ -n "$database" ]; then
        psql "$admin" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" >/dev/null || true
        database=""
    fi
}
cleanup() {
    stop_kernels
    drop_database
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
db_url() { python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$admin" "$1"; }
q() { psql "$(db_url "$database")" -Atqc "$1"; }

# Transactions, and row updates of the lease tables, of this database so far.
counters() {
    q "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
              (SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = 'nodes'),
              (SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = 'partitions')" |
        tr '|' ' '
}
# Summed CPU (ms) of the server processes serving this database now: "pid:ms" per line.
pg_cpu() {
    local pid
    for pid in $(q "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"); do
        [ -r "/proc/$pid/stat" ] || continue
        awk -v pid="$pid" '{ sub(/^.*\) /, ""); print pid ":" ($12 + $13) * 10 }' "/proc/$pid/stat"
    done
}
# CPU (ms) spent between two pg_cpu snapshots (processes that started meanwhile count whole).
pg_cpu_delta() {
    python3 - "$1" "$2" <<'EOF'
import sys
def read(path):
    return dict(line.strip().split(":") for line in open(path) if ":" in line)
before, after = read(sys.argv[1]), read(sys.argv[2])
print(sum(int(ms) - int(before.get(pid, 0)) for pid, ms in after.items()))
EOF
}
commits() {
    local url total=0 n
    for url in "$@"; do
        n=$(curl -fsS "$url/metrics" | awk '$1 == "keel_store_commit_seconds_count" { print $2 }')
        total=$((total + ${n%.*}))
    done
    echo "$total"
}
statements_available() {
    q "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1 &&
        q "SELECT pg_stat_statements_reset()" >/dev/null 2>&1
}
# pg_stat_statements calls: the fenced group commit, and lease/membership statements.
statement_calls() {
    q "SELECT coalesce(sum(calls) FILTER (WHERE query ILIKE '%fence AS%'), 0),
              coalesce(sum(calls) FILTER (WHERE query NOT ILIKE '%fence AS%'
                  AND (query ~* '\\m(nodes|partitions)\\M')), 0)
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())" |
        tr '|' ' '
}

balanced() {
    local n=$1 url
    shift
    for url in "$@"; do
        curl -fsS "$url/v0/cluster" 2>/dev/null | python3 -c '
import json, sys
view, n = json.load(sys.stdin), int(sys.argv[1])
live = [k for k in view["kernels"] if k["live"]]
ok = view["unowned"] == 0 and len(live) == n and all(k["partitions_owned"] >= view["partitions"] // n for k in live)
sys.exit(0 if ok else 1)' "$n" || return 1
    done
}

echo "kernel: $keel ($("$keel" --version)); $(nproc) cores; T8: --local-steps $steps --concurrency $conc, ${dur}s after ${warmup}s warm-up"
stmts=""
for mode in $nodes_list; do
    cluster_flags=(--cluster)
    n=$mode
    if [ "$mode" = single ]; then n=1 cluster_flags=(); fi
    database=keel_cbench_$(python3 -c 'import uuid; print(uuid.uuid4().hex[:12])')
    psql "$admin" -qc "CREATE DATABASE $database" >/dev/null
    url=$(db_url "$database")
    urls=()
    for i in $(seq 1 "$n"); do
        port=$(free_port)
        "$keel" dev --port "$port" --data-dir "$work/data-$mode-$i" --db-url "$url" --log-level warn \
            ${cluster_flags[@]+"${cluster_flags[@]}" --node-id "k$i" --advertise-url "http://127.0.0.1:$port"} \
            >"$work/kernel-$mode-$i.log" 2>&1 &
        pids+=("$!")
        urls+=("http://127.0.0.1:$port")
    done
    ready() {
        if [ "$mode" = single ]; then curl -fsS "$1/v0/ready" >/dev/null 2>&1; else balanced "$n" "$@"; fi
    }
    for _ in $(seq 1 300); do
        ready "${urls[@]}" && break
        sleep 0.1
    done
    ready "${urls[@]}" || { echo "$n kernels did not balance within 30 s" >&2; tail -n 20 "$work"/kernel-"$mode"-*.log >&2; exit 1; }
    if statements_available; then stmts=yes; else stmts=""; fi

    echo
    if [ "$mode" = single ]; then echo "== one kernel without --cluster: ${urls[*]}"; else echo "== $n cluster kernel(s): ${urls[*]}"; fi
    read -r x0 nu0 pu0 <<<"$(counters)"
    [ -z "$stmts" ] || read -r _ lease0 <<<"$(statement_calls)"
    sleep "$idle"
    read -r x1 nu1 pu1 <<<"$(counters)"
    python3 - "$n" "$idle" "$x0" "$x1" "$nu0" "$nu1" "$pu0" "$pu1" <<'EOF'
import sys
n, s = int(sys.argv[1]), float(sys.argv[2])
x0, x1, nu0, nu1, pu0, pu1 = map(int, sys.argv[3:])
print(f"idle: {(x1 - x0) / s / n:.1f} transactions/s per kernel (every background statement: "
      f"leases, membership, feed and timer polls); nodes rows updated {(nu1 - nu0) / s / n:.2f}/s "
      f"per kernel (heartbeats), partitions rows updated {(pu1 - pu0) / s / n:.1f}/s per kernel (renewals)")
EOF
    if [ -n "$stmts" ]; then
        read -r _ lease1 <<<"$(statement_calls)"
        echo "idle: $(python3 -c "print(f'{($lease1 - $lease0) / $idle / $n:.2f}')") lease/membership statements/s per kernel (pg_stat_statements)"
    fi

    csv_urls=$(IFS=,; echo "${urls[*]}")
    csv_pids=$(IFS=,; echo "${pids[*]}")
    read -r x0 nu0 pu0 <<<"$(counters)"
    [ -z "$stmts" ] || read -r g0 lease0 <<<"$(statement_calls)"
    c0=$(commits "${urls[@]}")
    pg_cpu >"$work/pg-before"
    started=$(date +%s.%N)
    "$keel" bench run --local-steps "$steps" --concurrency "$conc" --executions 1000000000 \
        --duration "${dur}s" --warmup "${warmup}s" --url "$csv_urls" --pid "$csv_pids" \
        --output json >"$work/report-$n.json"
    ended=$(date +%s.%N)
    pg_cpu >"$work/pg-after"
    c1=$(commits "${urls[@]}")
    read -r x1 nu1 pu1 <<<"$(counters)"
    [ -z "$stmts" ] || read -r g1 lease1 <<<"$(statement_calls)"
    pg_ms=$(pg_cpu_delta "$work/pg-before" "$work/pg-after")
    python3 - "$work/report-$n.json" "$n" "$started" "$ended" "$pg_ms" "$c0" "$c1" \
        "$x0" "$x1" "$nu0" "$nu1" "$pu0" "$pu1" "${g0:-}" "${g1:-}" "${lease0:-}" "${lease1:-}" <<'EOF'
import json, sys
report = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
n = int(sys.argv[2])
wall = float(sys.argv[4]) - float(sys.argv[3])
pg_ms, c0, c1, x0, x1, nu0, nu1, pu0, pu1 = map(int, sys.argv[5:14])
done = report["executions"]["completed"]
per = lambda ms: f"{ms / done:.3f}" if done else "n/a"
kernel_ms = report["kernel"]["cpu_ms"]
groups = c1 - c0
print(f"load: {report['executions_per_s']:.1f} executions/s ({done} in {report['elapsed_s']:.1f} s), "
      f"execution p50 {report['latency']['execution']['p50_ms']:.1f} ms p99 {report['latency']['execution']['p99_ms']:.1f} ms, "
      f"errors {report['errors']}")
print(f"load: kernel CPU {per(kernel_ms) if kernel_ms is not None else 'n/a'} ms/execution (all {n} kernels), "
      f"PostgreSQL CPU {per(pg_ms)} ms/execution (backends of this database), "
      f"bench CPU {report['bench']['cpu_ms_per_execution']} ms/execution")
if groups:
    print(f"load: {groups} group commits ({groups / done:.2f} per execution), "
          f"{(x1 - x0) / groups:.2f} transactions per group commit (all statements of the run, "
          f"warm-up included, divided by the group commits)")
print(f"load: {(x1 - x0) / wall / n:.0f} transactions/s per kernel; nodes rows updated "
      f"{(nu1 - nu0) / wall / n:.2f}/s per kernel, partitions rows updated {(pu1 - pu0) / wall / n:.1f}/s per kernel")
if sys.argv[14]:
    g0, g1, l0, l1 = map(int, sys.argv[14:18])
    if groups:
        print(f"load: {(g1 - g0) / groups:.2f} fenced group-commit statements per group commit; "
              f"{(l1 - l0) / wall / n:.2f} lease/membership statements/s per kernel (pg_stat_statements)")
else:
    print("load: pg_stat_statements is not loaded on this server (shared_preload_libraries); "
          "statements counted as transactions")
EOF
    stop_kernels
    drop_database
done
