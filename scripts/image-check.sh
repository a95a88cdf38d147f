#!/usr/bin/env bash
# Runs the Keel image the way deploy/ documents it and checks it (CI calls this after
# scripts/image.sh; see scripts/dist-check.sh):
#
#   bash scripts/image-check.sh [TAG]        # default localhost/keel:latest
#
# - `keel serve --production` (the image's default command) with a token, a policy and a
#   database URL, on a read-only root file system, as uid 10001, with a data volume;
# - the image's health check and readiness answer;
# - one SDK scenario against it: the README's runner and agent (rebuno 0.4.8, from
#   target/sdk-venv, which scripts/test.sh makes) and `keel executions create --wait`;
# - SIGTERM: the kernel shuts down within the grace and exits 0 (podman would SIGKILL it after
#   the grace, exit 137), and a restart on the same volume still has the execution.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/podman-env.sh

tag=${1:-localhost/keel:latest}
python=${KEEL_SDK_PYTHON:-${CARGO_TARGET_DIR:-target}/sdk-venv/bin/python}
keel_cli=${KEEL_CLI:-${CARGO_TARGET_DIR:-target}/debug/keel}
name=keel-image-check-$$
token=image-check-$RANDOM$RANDOM
grace=30
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    pod rm -f -t 0 "$name" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "image-check: FAILED: $*" >&2
    pod logs "$name" 2>&1 | tail -30 >&2 || true
    exit 1
}

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
mkdir -p "$work/data" "$work/policies"
chown 10001:10001 "$work/data"
cat > "$work/policies/policy.yaml" <<'EOF'
rules:
  - id: text-tools
    priority: 1
    when:
      tool_id: "text.*"
    then:
      decision: allow
  - id: weather-tools
    priority: 2
    when:
      tool_id: "weather_*"
    then:
      decision: allow
default:
  decision: deny
EOF

start() {
    # shellcheck disable=SC2046 # pod_limits prints several flags
    pod run -d --name "$name" --network host --read-only $(pod_limits) \
        -v "$work/data:/var/lib/keel" -v "$work/policies:/etc/keel/policies:ro" \
        -e KEEL_BIND=127.0.0.1 -e KEEL_PORT="$port" -e KEEL_URL="$url" -e KEEL_BEARER_TOKEN="$token" \
        -e KEEL_DB_URL=sqlite:///var/lib/keel/keel.db -e KEEL_POLICY=/etc/keel/policies/policy.yaml \
        "$tag" >/dev/null
    for _ in $(seq 1 60); do
        if curl -fsS "$url/v0/ready" >/dev/null 2>&1; then return 0; fi
        [ "$(pod inspect -f '{{.State.Running}}' "$name")" = true ] || fail "the container exited"
        sleep 0.5
    done
    fail "the kernel did not become ready within 30 s"
}

echo "image-check: starting $tag (serve --production, read-only root, port $port)"
start

# Not root, read-only root file system, the image's own health check.
pid=$(pod inspect -f '{{.State.Pid}}' "$name")
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
[ "$uid" = 10001 ] || fail "the kernel runs as uid $uid, not 10001"
root_options=$(awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | tail -1)
case ",$root_options," in *,ro,*) ;; *) fail "the root file system is mounted $root_options" ;; esac
pod healthcheck run "$name" >/dev/null || fail "the image's HEALTHCHECK failed"
curl -fsS "$url/v0/health" >/dev/null || fail "/v0/health"
status=$(curl -s -o /dev/null -w '%{http_code}' "$url/v0/executions")
[ "$status" = 401 ] || fail "an unauthenticated request answered $status, not 401"
echo "image-check: uid 10001, root file system read-only, healthy and ready, token required"

# One SDK scenario: the README's runner and agent, and the CLI waiting for the result.
"$python" - "$work" <<'EOF'
import pathlib, re, sys
text = pathlib.Path("README.md").read_text()
for name, body in re.findall(r"cat > (\S+) <<'EOF'\n(.*?\n)EOF\n", text, re.S):
    pathlib.Path(sys.argv[1], name).write_text(body)
EOF
export REBUNO_URL=$url REBUNO_API_KEY=$token
"$python" "$work/runner.py" > "$work/runner.log" 2>&1 &
pids+=($!)
"$python" "$work/agent.py" > "$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 40); do
    agents=$(curl -fsS -H "Authorization: Bearer $token" "$url/v0/agents" || true)
    runners=$(curl -fsS -H "Authorization: Bearer $token" "$url/v0/runners" || true)
    case "$agents$runners" in *'"assistant"'*'"weather-runner"'*) break ;; esac
    sleep 0.5
done
set +e
result=$(timeout 60 "$keel_cli" executions create --agent assistant --wait --wait-timeout 30s \
    --input '{"city": "Oslo", "note": "from the image check"}' --output json)
code=$?
set -e
[ "$code" = 0 ] || { tail -20 "$work/agent.log" "$work/runner.log" >&2; fail "the SDK scenario exited $code: $result"; }
execution=$(printf '%s' "$result" | python3 -c 'import json, sys; e = json.load(sys.stdin); assert e["status"] == "completed", e; assert e["output"]["forecast"]["sky"] == "sunny", e; assert e["output"]["words"] == 4, e; print(e["id"])') ||
    fail "unexpected result: $result"
echo "image-check: SDK scenario completed ($execution: a local tool, a remote tool on the runner)"
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
pids=()

# SIGTERM: a graceful shutdown within the grace, exit status 0.
started=$(date +%s.%N)
pod stop -t "$grace" "$name" >/dev/null
stopped=$(date +%s.%N)
exit_code=$(pod inspect -f '{{.State.ExitCode}}' "$name")
[ "$exit_code" = 0 ] || fail "after SIGTERM the kernel exited $exit_code (137: killed after the ${grace}s grace)"
pod logs "$name" 2>&1 | grep -q "shutdown started" || fail "no 'shutdown started' in the log"
echo "image-check: SIGTERM -> exit 0 in $(python3 -c "print(f'{$stopped - $started:.2f}')") s (grace ${grace} s)"

# The data volume keeps the execution across a new container.
pod rm -f "$name" >/dev/null
start
curl -fsS -H "Authorization: Bearer $token" "$url/v0/executions/$execution" | grep -q '"completed"' ||
    fail "the execution is gone after a restart on the same volume"
echo "image-check: restarted on the same volume, execution $execution still completed"
echo "image-check: ok"
