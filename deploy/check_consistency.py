#!/usr/bin/env python3
"""Consistency checks of deploy/ against the kernel's source, run by deploy/check.sh.

Needs only Python 3.11+ and PyYAML; no Docker engine, cluster or built kernel. Checks that the
artefacts name real flags and KEEL_* variables, give the kernel more time to stop than its own
graceful-shutdown deadline, keep to one kernel per database, and that the Dockerfile's build
context and dependency layer cover the workspace.

Prints one line per check: `PASS name`, `FAIL name: why`; exits 1 if any failed.
Usage: check_consistency.py REPO_ROOT
"""

from __future__ import annotations

import configparser
import fnmatch
import re
import sys
import tomllib
from pathlib import Path

import yaml

failures = 0


def report(name: str, problems: list[str]) -> None:
    """Prints the outcome of one check; counts it as failed when it has problems."""
    global failures
    if problems:
        failures += 1
        print(f"FAIL {name}: " + "; ".join(problems))
    else:
        print(f"PASS {name}")


def parse_duration(text: str) -> float:
    """Seconds of `30s`, `1m`, `1m30s`, `500ms`, `10` (systemd: seconds), `1min`."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(ms|min|sec|s|m|h)", text):
        total += float(number) * units[unit]
    if total == 0 and not re.fullmatch(r"0+\w*", text):
        raise ValueError(f"cannot parse duration {text!r}")
    return total


# --- What the kernel defines -----------------------------------------------------------------


def kernel_flags_and_env(repo: Path) -> tuple[set[str], set[str], dict[str, str]]:
    """Long flags, KEEL_* env names and env defaults declared with clap in src/."""
    flags: set[str] = set()
    envs: set[str] = set()
    defaults: dict[str, str] = {}
    # `#[arg(...)]` (one line or spread over several by rustfmt), then optional doc comments or
    # attributes, then the field it applies to.
    pattern = re.compile(r"#\[arg\((?P<attr>.*?)\)\]\s*(?:(?:///[^\n]*|#\[[^\n]*\])\s*)*pub\s+(?P<field>\w+)\s*:", re.S)
    for path in sorted((repo / "src").rglob("*.rs")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in pattern.finditer(text):
            attr = match.group("attr")
            if not re.search(r"\blong\b", attr):
                continue
            explicit = re.search(r'\blong\s*=\s*"([^"]+)"', attr)
            flags.add("--" + (explicit.group(1) if explicit else match.group("field").replace("_", "-")))
            env = re.search(r'\benv\s*=\s*"(KEEL_[A-Z0-9_]+)"', attr)
            if env:
                envs.add(env.group(1))
                default = re.search(r'default_value\s*=\s*"([^"]*)"', attr)
                if default:
                    defaults[env.group(1)] = default.group(1)
    return flags, envs, defaults


# --- What deploy/ uses ---------------------------------------------------------------------


def deploy_texts(deploy: Path) -> dict[str, str]:
    names = [
        "Dockerfile",
        "compose.yaml",
        "keel.service",
        "keel.env.example",
        "kubernetes/deployment.yaml",
        "kubernetes/secret.example.yaml",
        "kubernetes/configmap-policies.yaml",
        "kubernetes/service.yaml",
        "kubernetes/pdb.yaml",
    ]
    return {name: (deploy / name).read_text(encoding="utf-8") for name in names}


def kernel_services(compose: dict) -> dict[str, dict]:
    """The compose services that run the kernel (those using the keel image)."""
    return {name: service for name, service in compose.get("services", {}).items() if str(service.get("image", "")).startswith("keel:")}


def keel_command_lines(deploy: Path) -> list[tuple[str, list[str]]]:
    """(where, argv after `keel`) of every kernel invocation the artefacts make."""
    commands: list[tuple[str, list[str]]] = []
    dockerfile = (deploy / "Dockerfile").read_text(encoding="utf-8")
    for match in re.finditer(r"^CMD\s+(\[.*\])\s*$", dockerfile, re.M):
        commands.append(("Dockerfile CMD", yaml.safe_load(match.group(1))))
    health = re.search(r"exec keel (health[^\"\\]*)", dockerfile)
    if health:
        commands.append(("Dockerfile HEALTHCHECK", health.group(1).split()))
    compose = yaml.safe_load((deploy / "compose.yaml").read_text(encoding="utf-8"))
    for name, keel in kernel_services(compose).items():
        commands.append((f"compose {name} command", list(keel["command"])))
        test = keel["healthcheck"]["test"]
        if test[:2] == ["CMD", "keel"]:
            commands.append((f"compose {name} healthcheck", test[2:]))
    unit = (deploy / "keel.service").read_text(encoding="utf-8")
    for match in re.finditer(r"^ExecStart=(\S+)\s*(.*)$", unit, re.M):
        commands.append(("keel.service ExecStart", match.group(2).split()))
    deployment = yaml.safe_load((deploy / "kubernetes/deployment.yaml").read_text(encoding="utf-8"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    commands.append(("deployment args", list(container.get("args", []))))
    return commands


def check_names(repo: Path, deploy: Path) -> dict[str, str]:
    flags, envs, defaults = kernel_flags_and_env(repo)
    if not envs:
        report("kernel flags found in src/", ["no `#[arg(long, env = \"KEEL_*\")]` found"])
        return defaults
    used_env: dict[str, set[str]] = {}
    for name, text in deploy_texts(deploy).items():
        for var in re.findall(r"\bKEEL_[A-Z0-9_]+\b", text):
            used_env.setdefault(var, set()).add(name)
    unknown = [f"{var} (in {', '.join(sorted(where))})" for var, where in sorted(used_env.items()) if var not in envs]
    report(f"KEEL_* variables used in deploy/ exist in src/ ({len(used_env)} used, {len(envs)} defined)", unknown)

    # Every server setting is documented in the example environment (client-only and
    # artefact-controlled ones aside).
    config_rs = repo / "src" / "config.rs"
    block = re.search(r"pub struct Config \{(.*?)\n\}", config_rs.read_text(encoding="utf-8"), re.S) if config_rs.exists() else None
    if block:
        server_envs = set(re.findall(r'env\s*=\s*"(KEEL_[A-Z0-9_]+)"', block.group(1))) - {"KEEL_PRODUCTION", "KEEL_DUMP_CONFIG"}
        example = (deploy / "keel.env.example").read_text(encoding="utf-8")
        undocumented = sorted(var for var in server_envs if not re.search(rf"^#?{var}=", example, re.M))
        report(f"keel.env.example lists every server setting ({len(server_envs)})", [f"{var} missing" for var in undocumented])

    problems = []
    for where, argv in keel_command_lines(deploy):
        for arg in argv:
            flag = arg.split("=", 1)[0]
            if flag.startswith("--") and flag not in flags:
                problems.append(f"{where}: {flag}")
    report("flags passed to keel in deploy/ exist in src/", problems)
    return defaults


# --- Stop timeouts -------------------------------------------------------------------------


def check_stop_timeouts(deploy: Path, defaults: dict[str, str]) -> None:
    problems = []
    default = defaults.get("KEEL_SHUTDOWN_TIMEOUT")
    if default is None:
        report("stop timeouts exceed the kernel's shutdown timeout", ["no default of KEEL_SHUTDOWN_TIMEOUT in src/"])
        return
    shutdown = parse_duration(default)

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment]
    unit.read_string((deploy / "keel.service").read_text(encoding="utf-8"))
    stop = parse_duration(unit.get("Service", "TimeoutStopSec", fallback="90s"))
    unit_shutdown = shutdown
    for line in unit.get("Service", "Environment", fallback="").splitlines():
        if line.startswith("KEEL_SHUTDOWN_TIMEOUT="):
            unit_shutdown = parse_duration(line.split("=", 1)[1])
    if stop <= unit_shutdown:
        problems.append(f"keel.service TimeoutStopSec {stop:g}s <= shutdown timeout {unit_shutdown:g}s")

    compose = yaml.safe_load((deploy / "compose.yaml").read_text(encoding="utf-8"))
    for name, keel in kernel_services(compose).items():
        grace = parse_duration(keel.get("stop_grace_period", "10s"))
        if grace <= shutdown:
            problems.append(f"compose {name} stop_grace_period {grace:g}s <= shutdown timeout {shutdown:g}s")

    deployment = yaml.safe_load((deploy / "kubernetes/deployment.yaml").read_text(encoding="utf-8"))
    pod = deployment["spec"]["template"]["spec"]
    k8s_shutdown = shutdown
    for env in pod["containers"][0].get("env", []):
        if env["name"] == "KEEL_SHUTDOWN_TIMEOUT":
            k8s_shutdown = parse_duration(env["value"])
    period = pod.get("terminationGracePeriodSeconds", 30)
    if period <= k8s_shutdown:
        problems.append(f"terminationGracePeriodSeconds {period} <= shutdown timeout {k8s_shutdown:g}s")
    report(f"stop timeouts exceed the kernel's shutdown timeout ({default})", problems)


# --- Kubernetes ----------------------------------------------------------------------------


def check_kubernetes(deploy: Path) -> None:
    k8s = deploy / "kubernetes"
    docs = {path.name: list(yaml.safe_load_all(path.read_text(encoding="utf-8"))) for path in sorted(k8s.glob("*.yaml"))}
    deployment = docs["deployment.yaml"][0]
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    problems = []
    env = {item["name"]: item for item in container.get("env", [])}
    cluster = env.get("KEEL_CLUSTER", {}).get("value") == "true"
    replicas = spec.get("replicas", 1)
    strategy = spec.get("strategy", {})
    if cluster:
        # Several kernels: each pod names itself and is reached at its own address.
        if env.get("KEEL_NODE_ID", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "metadata.name":
            problems.append("KEEL_NODE_ID must come from the pod's name (fieldRef metadata.name)")
        advertise = env.get("KEEL_ADVERTISE_URL", {}).get("value", "")
        pod_ip = env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if "$(POD_IP)" not in advertise or pod_ip != "status.podIP":
            problems.append("KEEL_ADVERTISE_URL must use the pod's IP ($(POD_IP) from status.podIP)")
        elif not advertise.endswith(":8080"):
            problems.append(f"KEEL_ADVERTISE_URL {advertise!r} must name the container port 8080")
        if strategy.get("type") != "RollingUpdate" or strategy.get("rollingUpdate", {}).get("maxUnavailable") != 1:
            problems.append("a cluster rolls one kernel at a time (RollingUpdate, maxUnavailable: 1)")
        if "db-url" not in str(env.get("KEEL_DB_URL", {})):
            problems.append("KEEL_DB_URL must come from the Secret (PostgreSQL, shared by every kernel)")
        pdb = docs.get("pdb.yaml", [{}])[0]
        if pdb.get("kind") != "PodDisruptionBudget" or pdb.get("spec", {}).get("maxUnavailable") != 1:
            problems.append("pdb.yaml must limit voluntary disruptions to one kernel (maxUnavailable: 1)")
        if replicas < 2:
            problems.append(f"cluster mode with replicas {replicas}: run at least 2 (3 by default)")
    else:
        if replicas != 1:
            problems.append(f"replicas is {replicas} without KEEL_CLUSTER: one kernel per database in that mode")
        if strategy.get("type") != "Recreate":
            problems.append("strategy must be Recreate without KEEL_CLUSTER (a rolling update runs two kernels on one database)")
    text = (k8s / "deployment.yaml").read_text(encoding="utf-8")
    if not re.search(r"#.*(several kernels|one kernel per database)", text, re.I):
        problems.append("the comment explaining the replica count (cluster mode or one kernel per database) is missing")
    probe = lambda name: container.get(name, {}).get("httpGet", {}).get("path")  # noqa: E731
    if probe("livenessProbe") != "/v0/health":
        problems.append(f"livenessProbe path {probe('livenessProbe')!r}, expected /v0/health")
    if probe("readinessProbe") != "/v0/ready":
        problems.append(f"readinessProbe path {probe('readinessProbe')!r}, expected /v0/ready")
    if pod.get("enableServiceLinks") is not False:
        problems.append("enableServiceLinks must be false (a Service `keel` injects KEEL_PORT=tcp://...)")
    security = pod.get("securityContext", {})
    csecurity = container.get("securityContext", {})
    if not security.get("runAsNonRoot"):
        problems.append("runAsNonRoot is not set")
    if not csecurity.get("readOnlyRootFilesystem"):
        problems.append("readOnlyRootFilesystem is not set")
    if csecurity.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    resources = container.get("resources", {})
    if not resources.get("requests") or not resources.get("limits"):
        problems.append("resources.requests and resources.limits must be set")
    # References between the manifests.
    secret = docs["secret.example.yaml"][0]
    secret_keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    for env in container.get("env", []):
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if ref and (ref["name"] != secret["metadata"]["name"] or ref["key"] not in secret_keys):
            problems.append(f"env {env['name']} reads secret {ref['name']}/{ref['key']}, not in secret.example.yaml")
    configmap = docs["configmap-policies.yaml"][0]
    for volume in pod.get("volumes", []):
        if "configMap" in volume and volume["configMap"]["name"] != configmap["metadata"]["name"]:
            problems.append(f"volume {volume['name']} mounts ConfigMap {volume['configMap']['name']}, not defined")
    service = docs["service.yaml"][0]
    labels = spec["template"]["metadata"]["labels"]
    if any(labels.get(key) != value for key, value in service["spec"]["selector"].items()):
        problems.append("Service selector does not match the pod labels")
    if any(labels.get(key) != value for key, value in spec["selector"]["matchLabels"].items()):
        problems.append("Deployment selector does not match the pod labels")
    port_names = {port.get("name") for port in container.get("ports", [])}
    for port in service["spec"]["ports"]:
        if isinstance(port.get("targetPort"), str) and port["targetPort"] not in port_names:
            problems.append(f"Service targetPort {port['targetPort']} is not a container port name")
    kustomization = docs["kustomization.yaml"][0]
    for resource in kustomization.get("resources", []):
        if not (k8s / resource).exists():
            problems.append(f"kustomization resource {resource} does not exist")
    if "secret.example.yaml" in kustomization.get("resources", []):
        problems.append("kustomization must not apply secret.example.yaml")
    if security.get("runAsUser") != 10001:
        problems.append("runAsUser is not the image's uid 10001")
    report("Kubernetes manifests: replicas and cluster settings, probes, security, references", problems)


# --- Compose -------------------------------------------------------------------------------


def check_compose(deploy: Path) -> None:
    compose = yaml.safe_load((deploy / "compose.yaml").read_text(encoding="utf-8"))
    services = compose.get("services", {})
    problems = []
    kernels = kernel_services(compose)
    postgres = services.get("postgres", {})
    if not kernels:
        problems.append("no service runs the keel image")
    if not str(postgres.get("image", "")).startswith("postgres:16"):
        problems.append("postgres service must use postgres:16")
    if "healthcheck" not in postgres:
        problems.append("postgres needs a healthcheck")
    node_ids: dict[str, str] = {}
    host_ports: dict[str, str] = {}
    for name, keel in kernels.items():
        if "healthcheck" not in keel:
            problems.append(f"{name} needs a healthcheck")
        if keel.get("depends_on", {}).get("postgres", {}).get("condition") != "service_healthy":
            problems.append(f"{name} must wait for a healthy postgres")
        if keel.get("env_file") not in ("keel.env", ["keel.env"]):
            problems.append(f"{name} must read keel.env")
        mounts = [volume for volume in keel.get("volumes", []) if isinstance(volume, dict) and volume.get("target") == "/etc/keel/policies"]
        if not mounts or not mounts[0].get("read_only"):
            problems.append(f"{name}: the policy directory must be mounted read-only at /etc/keel/policies")
        elif not (deploy / mounts[0]["source"]).is_dir():
            problems.append(f"policy directory {mounts[0]['source']} does not exist")
        build = keel.get("build", {})
        if build and not (deploy / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).exists():
            problems.append(f"{name}: build context + dockerfile do not point at deploy/Dockerfile")
        # Each kernel needs its own node id and URL: a service must not be scaled.
        if keel.get("deploy", {}).get("replicas", 1) != 1 or "scale" in keel:
            problems.append(f"{name} must not be scaled (copy the service instead: each kernel needs its own node id)")
        environment = keel.get("environment", {})
        for port in keel.get("ports", []):
            host = str(port).rsplit(":", 1)[0]
            if host in host_ports:
                problems.append(f"{name} and {host_ports[host]} publish the same host port {host}")
            host_ports[host] = name
        if len(kernels) > 1:
            if str(environment.get("KEEL_CLUSTER")).lower() != "true":
                problems.append(f"{name}: several kernels on one database need KEEL_CLUSTER=true")
            node = str(environment.get("KEEL_NODE_ID", ""))
            if not node:
                problems.append(f"{name} has no KEEL_NODE_ID")
            elif node in node_ids:
                problems.append(f"{name} and {node_ids[node]} share the node id {node}")
            node_ids[node] = name
            if environment.get("KEEL_ADVERTISE_URL") != f"http://{name}:8080":
                problems.append(f"{name}: KEEL_ADVERTISE_URL must be http://{name}:8080 (its name on the compose network)")
    named = set(compose.get("volumes", {}))
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.get("source") if isinstance(volume, dict) else str(volume).split(":")[0]
            kind = volume.get("type", "volume") if isinstance(volume, dict) else ("bind" if source.startswith((".", "/")) else "volume")
            if kind == "volume" and source not in named:
                problems.append(f"named volume {source} is not declared")
    if "postgres-data" not in named:
        problems.append("postgres data must be on a named volume")
    report(f"compose.yaml: postgres:16, {len(kernels)} kernels with their own node ids, healthchecks, read-only policies, env file", problems)


# --- Dockerfile ----------------------------------------------------------------------------


def dockerignore_patterns(deploy: Path) -> list[tuple[bool, str]]:
    patterns = []
    for line in (deploy / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        patterns.append((negate, line.lstrip("!").rstrip("/")))
    return patterns


def excluded(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """Whether the build context leaves `path` out: a pattern matching the path or one of its
    parent directories excludes it, `**/` matches at any depth, the last matching pattern wins."""
    parts = path.split("/")
    result = False
    for negate, pattern in patterns:
        any_depth = pattern.startswith("**/")
        rest = pattern[3:] if any_depth else pattern
        for end in range(1, len(parts) + 1):
            starts = range(end) if any_depth else [0]
            if any(fnmatch.fnmatchcase("/".join(parts[start:end]), rest) for start in starts):
                result = not negate
                break
    return result


def check_dockerfile(repo: Path, deploy: Path) -> None:
    dockerfile = (deploy / "Dockerfile").read_text(encoding="utf-8")
    manifest = tomllib.loads((repo / "Cargo.toml").read_text(encoding="utf-8"))
    members = manifest.get("workspace", {}).get("members", ["."])
    problems = []
    # Dependency layer: every member's manifest copied before the first cargo build.
    before_build = dockerfile.split("cargo build", 1)[0]
    copied = set()
    for match in re.finditer(r"^COPY\s+(?!--from)(.+?)\s+(\S+)\s*$", before_build, re.M):
        copied.update(match.group(1).split())
    for member in members:
        wanted = "Cargo.toml" if member in (".", "") else f"{member}/Cargo.toml"
        if wanted not in copied:
            problems.append(f"workspace member {member!r}: {wanted} is not copied into the dependency layer")
    if "Cargo.lock" not in copied or "--locked" not in dockerfile:
        problems.append("Cargo.lock must be copied and the build must use --locked")
    # Build context: nothing the compiler reads is left out.
    patterns = dockerignore_patterns(deploy)
    needed = ["Cargo.toml", "Cargo.lock"]
    for member in members:
        base = "" if member in (".", "") else member + "/"
        needed += [base + "Cargo.toml", base + "src/lib.rs" if (repo / base / "src/lib.rs").exists() else base + "src"]
        if (repo / base / "build.rs").exists():
            needed.append(base + "build.rs")
    for path in sorted((repo / "src").rglob("*.rs")) + sorted((repo / "actors").rglob("*.rs")):
        for match in re.finditer(r'sqlx::migrate!\(\s*"([^"]+)"', path.read_text(encoding="utf-8", errors="replace")):
            needed.append(match.group(1))
    for path in needed:
        if excluded(path, patterns):
            problems.append(f"{path} is needed to compile but Dockerfile.dockerignore excludes it")
    for secret in ["deploy/keel.env", ".env", "deploy/.env"]:
        if not excluded(secret, patterns):
            problems.append(f"{secret} would be sent to the build context")
    # Runtime image.
    runtime = dockerfile.rsplit("FROM ", 1)[1]
    if not re.search(r"^USER\s+10001(:10001)?\s*$", runtime, re.M):
        problems.append("runtime stage must run as USER 10001")
    for needle, why in [
        ("HEALTHCHECK", "HEALTHCHECK missing"),
        ("EXPOSE 8080", "EXPOSE 8080 missing"),
        ('ENTRYPOINT ["keel"]', 'ENTRYPOINT ["keel"] missing'),
        ("/var/lib/keel", "/var/lib/keel volume missing"),
    ]:
        if needle not in runtime:
            problems.append(why)
    if "curl" in re.sub(r"#.*", "", runtime):
        problems.append("runtime image installs curl; use `keel health`")
    report("Dockerfile: dependency layer covers the workspace, context, runtime user", problems)


def check_reload_signal(repo: Path, deploy: Path) -> None:
    """`systemctl reload` sends SIGHUP: without a handler its default action ends the process,
    and systemd counts a death by SIGHUP as a clean exit, so Restart=on-failure does not even
    bring the kernel back."""
    unit = (deploy / "keel.service").read_text(encoding="utf-8")
    if not re.search(r"^ExecReload=.*\bHUP\b", unit, re.M):
        report("keel.service sends no SIGHUP", [])
        return
    handled = any(
        re.search(r"SignalKind::hangup\(\)|\bSIGHUP\b.*signal|signal_hook.*SIGHUP", path.read_text(encoding="utf-8", errors="replace"))
        for path in (repo / "src").rglob("*.rs")
    )
    report(
        "the kernel handles SIGHUP (keel.service ExecReload=/bin/kill -HUP)",
        [] if handled else [
            "no SIGHUP handler in src/ (tokio SignalKind::hangup()): `systemctl reload keel` would "
            "terminate the kernel, and systemd treats that as a clean exit, so it stays down. "
            "Policy reload on SIGHUP is part of issue 3"
        ],
    )


def main() -> int:
    repo = Path(sys.argv[1]).resolve()
    deploy = repo / "deploy"
    defaults = check_names(repo, deploy)
    check_stop_timeouts(deploy, defaults)
    check_kubernetes(deploy)
    check_compose(deploy)
    check_dockerfile(repo, deploy)
    check_reload_signal(repo, deploy)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
