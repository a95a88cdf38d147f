#!/usr/bin/env bash
# CI's distribution step (.ci/run runs it after scripts/test.sh): builds the release tarball and
# checks it, builds the container image from the same binary and runs it.
#
#   bash scripts/dist-check.sh
#
# 1. scripts/package.sh: release build, stripped binary + split debug info, tarball, checksums;
# 2. the tarball: checksums verify, it unpacks, the binary runs and names its debug file, the
#    deploy files, policies and licences are in it;
# 3. scripts/image.sh: the image, from Debian packages and the release binary;
# 4. scripts/image-check.sh: the image runs as documented (non-root, read-only, healthy,
#    an SDK scenario, SIGTERM).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
step() { echo "dist-check: $* ($(date -u +%H:%M:%S))"; }
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT

step "package"
KEEL_DIST_DIR=$dist bash scripts/package.sh

step "verify the tarball"
(cd "$dist" && sha256sum --quiet -c SHA256SUMS)
tar -C "$dist" -xzf "$dist"/keel-*-linux-gnu.tar.gz --exclude='*-debug*'
root=$(find "$dist" -mindepth 1 -maxdepth 1 -type d -name 'keel-*' | head -1)
"$root/keel" --version | grep -q '^keel ' || { echo "dist-check: the packaged binary does not run" >&2; exit 1; }
readelf --string-dump=.gnu_debuglink "$root/keel" | grep -q 'keel.debug' ||
    { echo "dist-check: the binary does not name its debug file" >&2; exit 1; }
if readelf -S "$root/keel" | grep -q '\.debug_info'; then
    echo "dist-check: the packaged binary still has debug info" >&2
    exit 1
fi
for file in README.md deploy/Containerfile deploy/keel.service deploy/compose.yaml \
    deploy/kubernetes/deployment.yaml policies LICENSE licenses/keel.txt licenses/THIRD-PARTY.txt \
    licenses/THIRD-PARTY-TEXTS.txt; do
    [ -e "$root/$file" ] || { echo "dist-check: $file is missing from the tarball" >&2; exit 1; }
done
grep -q '^tokio ' "$root/licenses/THIRD-PARTY.txt" ||
    { echo "dist-check: THIRD-PARTY.txt does not list the crates" >&2; exit 1; }
grep -q '^tokio .*: LICENSE' "$root/licenses/THIRD-PARTY-TEXTS.txt" ||
    { echo "dist-check: THIRD-PARTY-TEXTS.txt does not hold the crates' licence texts" >&2; exit 1; }
grep -q 'Apache License' "$root/LICENSE" || { echo "dist-check: LICENSE is not the licence text" >&2; exit 1; }
"$root/keel" policy check "$root/policies/safe-shell.yaml" >/dev/null

step "image"
bash scripts/image.sh "${CARGO_TARGET_DIR:-target}/${KEEL_PROFILE:-release}/keel" localhost/keel:ci

step "image check"
bash scripts/image-check.sh localhost/keel:ci
step "ok"
