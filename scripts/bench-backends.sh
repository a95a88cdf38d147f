#!/usr/bin/env bash
# Runs the same `keel bench` against a kernel on SQLite and on PostgreSQL and prints, for each,
# the bench report and the store commit latency and batch size from the kernel's /metrics.
# The numbers in docs/benchmarks.md come from this script.
#
#   cargo build --profile production --bin keel
#   KEEL_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test bash scripts/bench-backends.sh
#
# Environment:
#   KEEL                    kernel binary (default target/production/keel)
#   KEEL_TEST_POSTGRES_URL  admin URL of a PostgreSQL server; a database keel_bench_<random> is
#                           created there for the run and dropped after (needs psql). Without
#                           it only SQLite runs.
#   BENCH_ARGS              `keel bench` scenario and flags (default below: the mixed `run`
#                           loop); the same for both backends, e.g.
#                           "run --local-steps 5 --concurrency 64 --executions 1000000 --duration 15s"
#   ROUNDS                  runs per backend (default 3), each on a fresh database
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
keel=${KEEL:-target/production/keel}
bench_args=${BENCH_ARGS:-"--executions 2000 --concurrency 32 --tools-per-execution 4 --agents 2 --runners 4 --duration 120s"}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
kernel_pid=""
database=""

cleanup() {
    if [ -n "$kernel_pid" ]; then kill -TERM "$kernel_pid" 2>/dev/null || true; wait "$kernel_pid" 2>/dev/null || true; fi
    if [ -n "$database" ]; then psql "$KEEL_TEST_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Prints count, mean and p50/p90/p99 (bucket upper bounds) of a Prometheus histogram.
histogram() {
    python3 - "$1" "$2" "$3" <<'EOF'
import re, sys
text, name, unit = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
scale = 1000.0 if unit == "ms" else 1.0
buckets = [(float(le), float(n)) for le, n in
           re.findall(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text, re.M)]
count = float(re.search(rf"^{name}_count (\S+)$", text, re.M).group(1))
total = float(re.search(rf"^{name}_sum (\S+)$", text, re.M).group(1))
def quantile(q):
    for le, n in buckets:
        if n >= q * count:
            return le * scale
    return float("inf")
print(f"{name}: n={count:.0f} mean={total / count * scale:.2f}{unit} "
      f"p50<={quantile(0.5):g}{unit} p90<={quantile(0.9):g}{unit} p99<={quantile(0.99):g}{unit}")
EOF
}

run() {
    local label=$1 db_url=$2 port log
    port=$(free_port)
    log=$work/kernel-$label.log
    "$keel" dev --port "$port" --data-dir "$work/data-$label" --db-url "$db_url" \
        --log-level warn >"$log" 2>&1 &
    kernel_pid=$!
    for _ in $(seq 1 100); do
        curl -fsS "http://127.0.0.1:$port/v0/ready" >/dev/null 2>&1 && break
        sleep 0.1
    done
    echo "== $label: $keel dev --db-url $db_url"
    # shellcheck disable=SC2086 # bench_args is a list of words on purpose
    "$keel" bench $bench_args --url "http://127.0.0.1:$port" --pid "$kernel_pid"
    curl -fsS "http://127.0.0.1:$port/metrics" >"$work/metrics"
    histogram "$work/metrics" keel_store_commit_seconds ms
    histogram "$work/metrics" keel_store_commit_batch_size ""
    kill -TERM "$kernel_pid"
    wait "$kernel_pid" || true
    kernel_pid=""
}

echo "kernel: $keel ($("$keel" --version)); $(nproc) cores; bench: $bench_args"
for round in $(seq 1 "$rounds"); do
    rm -rf "$work/data-sqlite"
    run sqlite "sqlite://$work/data-sqlite/keel.db"
    if [ -n "${KEEL_TEST_POSTGRES_URL:-}" ]; then
        database=keel_bench_$(python3 -c 'import uuid; print(uuid.uuid4().hex)')
        psql "$KEEL_TEST_POSTGRES_URL" -qc "CREATE DATABASE $database"
        run postgres "${KEEL_TEST_POSTGRES_URL%/*}/$database"
        psql "$KEEL_TEST_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)"
        database=""
    else
        echo "== postgres: skipped (KEEL_TEST_POSTGRES_URL is not set)"
    fi
    echo "-- round $round done"
done
