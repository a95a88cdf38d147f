#!/usr/bin/env bash
# The whole test suite: build, Rust tests, the deploy/ checks (deploy/check.sh --no-install),
# then the SDK compatibility scenarios that drive the kernel binary with the real rebuno==0.4.8
# Python SDK. When KEEL_TEST_POSTGRES_URL is set,
# the HTTP/SSE suite (tests/api), the kill -9 crash test and the SDK scenarios run a second
# time with every kernel on a fresh PostgreSQL database (KEEL_TEST_BACKEND=postgres), and the
# SDK scenarios a third time with every scenario kernel made of three --cluster kernels on one
# fresh database, agents, runners and clients spread over them (KEEL_TEST_BACKEND=cluster);
# without it those PostgreSQL passes are skipped, and the script says so.
#
#   bash scripts/test.sh
#
# Environment:
#   PYTHON                  interpreter for the SDK venv (default: first of python3,
#                           python3.13, python3.12, python3.11 that is >= 3.11)
#   KEEL_BIN                kernel binary for the SDK tests (default: the one just built)
#   KEEL_TEST_POSTGRES_URL  enables the PostgreSQL tests (postgres://user@host:port/db, an
#                           admin database: each test creates and drops its own database)
#   KEEL_TEST_CHROMEDRIVER  chromedriver for the web console's browser tests (default:
#                           /usr/bin/chromedriver when it exists; without one they are SKIPPED)
#   PYTEST_ARGS             extra arguments for pytest (e.g. "-k signal -x")
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
venv=$target_dir/sdk-venv
requirements=$root/tests/sdk/requirements.txt

step() { printf '\n==> %s\n' "$*"; }

failures=()

step "cargo build --bins"
cargo build --bins

# The test binaries read KEEL_TEST_BACKEND; only the second passes below set it.
unset KEEL_TEST_BACKEND
postgres=${KEEL_TEST_POSTGRES_URL:-}
if [ -n "$postgres" ]; then
    echo "postgres: KEEL_TEST_POSTGRES_URL is set; PostgreSQL tests will run"
else
    echo "postgres: KEEL_TEST_POSTGRES_URL is not set; PostgreSQL tests are SKIPPED"
    echo "          (store conformance/outage, api suite, crash test and SDK scenarios on PostgreSQL)"
fi

if cargo nextest --version >/dev/null 2>&1; then
    step "cargo nextest run --workspace"
    # --no-fail-fast: one failure must not hide the others.
    cargo nextest run --workspace --no-fail-fast --no-tests=warn || failures+=("rust tests")
    # The outage tests pick their backends themselves: they ran in the pass above. The pass
    # selects its binaries with a filter on the whole workspace, so it reuses the build above
    # (building only `--test api --test crash` resolves features differently and recompiles).
    backend_pass=(cargo nextest run --workspace --no-fail-fast
        -E '(binary(api) | binary(crash)) & not test(/^outage::/)')
else
    step "cargo test --workspace (cargo-nextest not found)"
    cargo test --workspace --no-fail-fast || failures+=("rust tests")
    backend_pass=(cargo test --test api --test crash -- --skip outage::)
fi

step "api suite and crash test on PostgreSQL (KEEL_TEST_BACKEND=postgres)"
if [ -n "$postgres" ]; then
    KEEL_TEST_BACKEND=postgres "${backend_pass[@]}" || failures+=("rust tests on postgres")
else
    echo "SKIPPED: KEEL_TEST_POSTGRES_URL is not set"
fi

# --- deploy/ against the kernel ----------------------------------------------------------
# deploy/check.sh checks the artefacts (env example, unit, compose file, manifests, Dockerfile)
# against the kernel just built: every server setting listed, every environment accepted, a
# smoke run. --no-install: only the validators already on the machine run, the others are
# reported as skipped (deploy/check.sh without it installs them).
step "deploy/check.sh --no-install"
KEEL_BIN="$target_dir/debug/keel" bash "$root/deploy/check.sh" --no-install || failures+=("deploy checks")

# --- SDK compatibility tests --------------------------------------------------------

find_python() {
    local candidates=("${PYTHON:-}" python3 python3.13 python3.12 python3.11) c
    for c in "${candidates[@]}"; do
        [ -n "$c" ] || continue
        command -v "$c" >/dev/null 2>&1 || continue
        if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

sdk_summary() {
    # The summary line the CI log is read for: "sdk: N passed, M failed[, K skipped]"
    # ("sdk (postgres): ..." for the PostgreSQL pass).
    local report=$1 label=${2:-sdk}
    "$venv/bin/python" - "$report" "$label" <<'EOF' 2>/dev/null || echo "$label: 0 passed, 1 failed"
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
line = f"{sys.argv[2]}: {total - failed - skipped} passed, {failed} failed"
print(line + (f", {skipped} skipped" if skipped else ""))
EOF
}

step "SDK compatibility tests (rebuno==0.4.8)"
if ! python=$(find_python); then
    echo "error: the SDK compatibility tests need Python >= 3.11 (rebuno 0.4.8 imports enum.StrEnum)," >&2
    echo "       but no python3/python3.11+ on PATH is new enough. Install Python 3.11 or newer" >&2
    echo "       (Debian: apt-get install python3 python3-venv) or set PYTHON=/path/to/python3.11." >&2
    echo "sdk: 0 passed, 1 failed"
    exit 1
fi
echo "python: $("$python" --version 2>&1) ($(command -v "$python"))"

# (Re)create the venv when it is missing, broken, or built by another interpreter.
want_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ ! -x "$venv/bin/python" ] ||
    [ "$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$want_version" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
fi
stamp=$venv/.requirements.sha256
want_hash=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want_hash" ]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    echo "$want_hash" >"$stamp"
fi

if [ -z "${KEEL_TEST_CHROMEDRIVER:-}" ] && [ -x /usr/bin/chromedriver ]; then
    export KEEL_TEST_CHROMEDRIVER=/usr/bin/chromedriver
fi
if [ -n "${KEEL_TEST_CHROMEDRIVER:-}" ]; then
    export KEEL_TEST_SCREENSHOTS=${KEEL_TEST_SCREENSHOTS:-$target_dir/console-screenshots}
    echo "console: browser tests use $KEEL_TEST_CHROMEDRIVER (screenshots in $KEEL_TEST_SCREENSHOTS)"
else
    echo "console: no chromedriver (KEEL_TEST_CHROMEDRIVER unset); the browser tests are SKIPPED"
fi
export KEEL_BIN=${KEEL_BIN:-$target_dir/debug/keel}
echo "kernel: $KEEL_BIN"
report=$target_dir/sdk-junit.xml
rm -f "$report"
set +e
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
"$venv/bin/python" -m pytest "$root/tests/sdk" --junitxml="$report" ${PYTEST_ARGS:-}
sdk_rc=$?
set -e
# 5 = no tests collected: that is a failure too.
[ "$sdk_rc" -eq 0 ] || failures+=("sdk tests (pytest exit $sdk_rc)")

step "Keel Python SDK tests (sdk/python, installed from the wheel it builds)"
keel_sdk_report=$target_dir/keel-sdk-junit.xml
rm -f "$keel_sdk_report"
set +e
"$venv/bin/python" -m pytest "$root/sdk/python/tests" -p no:cacheprovider \
    --junitxml="$keel_sdk_report"
keel_sdk_rc=$?
set -e
[ "$keel_sdk_rc" -eq 0 ] || failures+=("keel-sdk tests (pytest exit $keel_sdk_rc)")

step "SDK compatibility and keel-sdk tests on PostgreSQL (KEEL_TEST_BACKEND=postgres)"
pg_report=$target_dir/sdk-junit-postgres.xml
keel_sdk_pg_report=$target_dir/keel-sdk-junit-postgres.xml
rm -f "$pg_report" "$keel_sdk_pg_report"
pg_skip=""
if [ -z "$postgres" ]; then
    pg_skip="KEEL_TEST_POSTGRES_URL is not set"
elif ! command -v psql >/dev/null 2>&1; then
    # tests/sdk/backend.py creates and drops each kernel's database with psql.
    pg_skip="psql (the PostgreSQL client) is not on PATH"
fi
if [ -z "$pg_skip" ]; then
    set +e
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
    KEEL_TEST_BACKEND=postgres "$venv/bin/python" -m pytest "$root/tests/sdk" \
        --junitxml="$pg_report" ${PYTEST_ARGS:-}
    pg_rc=$?
    # The Keel Python SDK's own tests (journal replay of local calls) on PostgreSQL too.
    KEEL_TEST_BACKEND=postgres "$venv/bin/python" -m pytest "$root/sdk/python/tests" \
        -p no:cacheprovider --junitxml="$keel_sdk_pg_report"
    keel_sdk_pg_rc=$?
    set -e
    [ "$pg_rc" -eq 0 ] || failures+=("sdk tests on postgres (pytest exit $pg_rc)")
    [ "$keel_sdk_pg_rc" -eq 0 ] || failures+=("keel-sdk tests on postgres (pytest exit $keel_sdk_pg_rc)")
else
    echo "SKIPPED: $pg_skip"
fi

step "SDK compatibility tests on three cluster kernels (KEEL_TEST_BACKEND=cluster)"
cluster_report=$target_dir/sdk-junit-cluster.xml
rm -f "$cluster_report"
if [ -z "$pg_skip" ]; then
    cluster_started=$SECONDS
    set +e
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
    KEEL_TEST_BACKEND=cluster "$venv/bin/python" -m pytest "$root/tests/sdk" \
        --junitxml="$cluster_report" ${PYTEST_ARGS:-}
    cluster_rc=$?
    set -e
    echo "sdk (cluster): $((SECONDS - cluster_started)) s"
    [ "$cluster_rc" -eq 0 ] || failures+=("sdk tests on a cluster (pytest exit $cluster_rc)")
else
    echo "SKIPPED: $pg_skip"
fi

echo
if [ "${#failures[@]}" -gt 0 ]; then
    echo "FAILED: ${failures[*]}"
else
    echo "all tests passed"
fi
sdk_summary "$report"
sdk_summary "$keel_sdk_report" "keel-sdk"
if [ -z "$pg_skip" ]; then
    sdk_summary "$pg_report" "sdk (postgres)"
    sdk_summary "$keel_sdk_pg_report" "keel-sdk (postgres)"
    sdk_summary "$cluster_report" "sdk (cluster)"
else
    echo "sdk (postgres): skipped ($pg_skip)"
    echo "keel-sdk (postgres): skipped ($pg_skip)"
    echo "sdk (cluster): skipped ($pg_skip)"
fi
[ "${#failures[@]}" -eq 0 ]
