#!/usr/bin/env bash
# Crash takeover timing (issue 32, check 2): RUNS times, kill -9 one of three cluster kernels
# under a steady load spread over all of them, and time until every execution it owned makes
# progress again through the survivors; prints each run and the p50 and max over the runs.
# The method is in scripts/cluster_failover.py.
#
#   cargo build --profile production --bin keel
#   KEEL_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test bash scripts/cluster-failover.sh
#
# Environment:
#   KEEL                    kernel binary (default target/production/keel, else target/release/keel)
#   KEEL_TEST_POSTGRES_URL  admin URL of the PostgreSQL server (needed; needs psql); a database
#                           keel_failover_<random> is created and dropped at the end
#   PYTHON                  Python with httpx (default target/sdk-venv/bin/python, made by
#                           scripts/test.sh)
#   RUNS                    kills (default 10; the victim rotates over k1, k2, k3)
#   EXECUTIONS, WORKERS     executions signalled and concurrent clients (default 60 and 16)
#   WARMUP                  seconds of load before each kill (default 3)
#   LIMIT                   seconds a run may take before it fails (default 30)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${KEEL_TEST_POSTGRES_URL:?set KEEL_TEST_POSTGRES_URL to a PostgreSQL admin URL}"
if [ -z "${KEEL:-}" ]; then
    KEEL=target/production/keel
    [ -x "$KEEL" ] || KEEL=target/release/keel
fi
[ -x "$KEEL" ] || { echo "no kernel binary at $KEEL (set KEEL)" >&2; exit 1; }
python=${PYTHON:-target/sdk-venv/bin/python}
"$python" -c 'import httpx' 2>/dev/null || {
    echo "$python cannot import httpx (run scripts/test.sh once, or set PYTHON)" >&2
    exit 1
}
KEEL=$(realpath "$KEEL") exec "$python" scripts/cluster_failover.py
