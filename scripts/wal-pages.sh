#!/usr/bin/env bash
# Where a SQLite transaction's WAL pages go under T1 load (docs/benchmarks.md, "Where the WAL's
# pages go"): starts `keel dev` on a fresh data directory, runs `keel bench run --local-steps 5
# --concurrency 64` against it, freezes the kernel (SIGSTOP) after LOAD seconds, copies the
# database and its WAL, kill -9s the kernel, then attributes every WAL frame of each committed
# transaction to its table or index with SQLite's `dbstat` (Python's sqlite3 module).
#
#   cargo build --profile production --bin keel
#   bash scripts/wal-pages.sh            # KEEL [target/production/keel]  LOAD [5.5]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
keel=$(realpath "${KEEL:-target/production/keel}")
load=${LOAD:-5.5}
work=$(mktemp -d)
kernel_pid="" bench_pid=""
cleanup() {
    [ -n "$kernel_pid" ] && kill -9 "$kernel_pid" 2>/dev/null
    [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$keel" dev --bind 127.0.0.1 --port "$port" --data-dir "$work/data" --log-level warn >/dev/null 2>&1 &
kernel_pid=$!
for _ in $(seq 1 200); do curl -fsS "http://127.0.0.1:$port/v0/ready" >/dev/null 2>&1 && break; sleep 0.05; done
"$keel" bench run --url "http://127.0.0.1:$port" --local-steps 5 --concurrency 64 \
    --executions 1000000000 --duration 60s --output json >/dev/null 2>&1 &
bench_pid=$!
sleep "$load"
kill -STOP "$kernel_pid"
cp "$work/data/keel.db" "$work/copy.db"
cp "$work/data/keel.db-wal" "$work/copy.db-wal"

python3 - "$work/copy.db" <<'EOF_PY'
import collections, sqlite3, struct, sys

path = sys.argv[1]
wal = open(path + "-wal", "rb").read()
_, _, page_size, _, salt1, salt2, _, _ = struct.unpack(">IIIIIIII", wal[:32])
transactions, pending, offset = [], set(), 32
while offset + 24 + page_size <= len(wal):
    page, commit, s1, s2, _, _ = struct.unpack(">IIIIII", wal[offset:offset + 24])
    if (s1, s2) != (salt1, salt2):
        break  # frames of an earlier generation of the WAL
    pending.add(page)
    if commit:
        transactions.append(pending)
        pending = set()
    offset += 24 + page_size
db = sqlite3.connect(path)  # applies the copied WAL
owner = dict((page, name) for name, page in db.execute("SELECT name, pageno FROM dbstat"))
pages = collections.Counter(owner.get(page, "?") for tx in transactions for page in tx)
count = max(len(transactions), 1)
print(f"page size {page_size}; {len(transactions)} transactions in the WAL; "
      f"{sum(map(len, transactions)) / count:.1f} distinct pages per transaction")
for name, n in pages.most_common():
    print(f"{n / count:6.2f}  {name}")
EOF_PY
