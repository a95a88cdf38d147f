# Sourced by scripts/image.sh and scripts/image-check.sh: `pod` runs podman with what works on
# hosts without systemd and with hybrid (v1) cgroups, such as CI machines and containers:
# - runc as the OCI runtime (podman's default crun refuses hybrid cgroup hierarchies);
# - the cgroupfs cgroup manager and file-based events (no systemd to ask);
# - the vfs storage driver when overlay cannot be mounted (nested in a container).
# `pod_limits` prints --ulimit flags no higher than what this host allows: podman's defaults
# (nofile 1048576, nproc 4194304) are refused where the runtime may not raise limits, and some
# kernels also refuse an nproc above kernel.pid_max.

pod() {
    podman --runtime runc --cgroup-manager cgroupfs --events-backend file "$@"
}

pod_limits() {
    local nofile nproc
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    [ "$nofile" = unlimited ] && nofile=1048576
    [ "$nproc" = unlimited ] && nproc=4194304
    local pid_max
    pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo "$nproc")
    [ "$nproc" -gt "$pid_max" ] && nproc=$pid_max
    echo "--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
}

if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    echo "podman and runc are needed (Debian: apt-get install podman runc mmdebstrap)" >&2
    exit 1
fi
