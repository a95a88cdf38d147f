#!/usr/bin/env bash
# Builds the Keel container image with podman, from Debian packages and a release binary, with no
# image registry:
#
#   bash scripts/image.sh [BINARY] [TAG]     # default: target/release/keel, localhost/keel:<version>
#
# 1. mmdebstrap unpacks libc6, libgcc-s1 and ca-certificates (and what they depend on) into a
#    root file system; the script adds the CA bundle, a root and a `keel` user (uid/gid 10001),
#    /var/lib/keel owned by it and /tmp, and drops docs and apt's leftovers.
# 2. `podman import` makes it the base image localhost/keel-base:<suite>.
# 3. `podman build -f deploy/Containerfile` copies the binary in, stripped with its debug info
#    split off (scripts/package.sh does the same for the tarball).
#
# Needs root, podman, mmdebstrap and binutils (Debian: apt-get install podman mmdebstrap runc).
# KEEL_DEBIAN_MIRROR and KEEL_DEBIAN_SUITE (default bookworm) pick where the packages come from.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/podman-env.sh

binary=${1:-${CARGO_TARGET_DIR:-target}/release/keel}
version=$("$binary" --version | awk '{print $2}')
tag=${2:-localhost/keel:$version}
suite=${KEEL_DEBIAN_SUITE:-bookworm}
mirror=${KEEL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=localhost/keel-base:$suite

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs

echo "image: root file system from Debian $suite packages"
mmdebstrap --quiet --variant=extract --include=libc6,libgcc-s1,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    "$suite" "$rootfs" "$mirror"
# The extract variant runs no maintainer scripts: make what they would have made.
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/var/lib/keel" "$rootfs/etc/keel/policies" "$rootfs/tmp"
cat "$rootfs"/usr/share/ca-certificates/mozilla/*.crt > "$rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nkeel:x:10001:10001:keel:/var/lib/keel:/usr/sbin/nologin\n' \
    > "$rootfs/etc/passwd"
printf 'root:x:0:\nkeel:x:10001:\n' > "$rootfs/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
chown 10001:10001 "$rootfs/var/lib/keel"
chmod 0750 "$rootfs/var/lib/keel"
chmod 1777 "$rootfs/tmp"
rm -rf "$rootfs/var/cache/apt" "$rootfs/var/lib/apt" "$rootfs/var/log"/*
tar --numeric-owner -C "$rootfs" -c . | pod import --quiet - "$base" >/dev/null
echo "image: base $base $(du -sh "$rootfs" | cut -f1)"

context=$work/context
mkdir -p "$context"
objcopy --strip-debug --strip-unneeded "$binary" "$context/keel"
cp deploy/Containerfile "$context/Containerfile"
pod build --quiet --format docker --build-arg "BASE=$base" -t "$tag" -t localhost/keel:latest \
    "$context" >/dev/null
echo "image: $tag (binary $(du -h "$context/keel" | cut -f1) stripped from $(du -h "$binary" | cut -f1))"
pod image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^localhost/keel(-base)?:' || true
