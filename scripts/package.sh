#!/usr/bin/env bash
# Makes a release tarball of Keel:
#
#   bash scripts/package.sh            # -> dist/keel-<version>-<target>.tar.gz (+ -debug, SHA256SUMS)
#
# The tarball holds the stripped binary, the deploy files, the example policies, the README, the
# licence (LICENSE), the list of the crates compiled in with their licences and the licence texts
# those crates ship (licenses/); its debug info goes into a
# second tarball (`keel.debug`, linked from the binary by .gnu_debuglink, so gdb and perf find
# it when it sits beside the binary or in /usr/lib/debug). dist/SHA256SUMS covers both.
#
# KEEL_PROFILE picks the cargo profile (default `release`; `production` adds fat LTO for about
# 6 % less CPU at twice the build time). KEEL_BINARY skips the build and packages that binary.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
profile=${KEEL_PROFILE:-release}
version=$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "keel"))')
target=$(rustc -vV | sed -n 's/^host: //p')
name=keel-$version-$target
dist=${KEEL_DIST_DIR:-dist}

if [ -n "${KEEL_BINARY:-}" ]; then
    binary=$KEEL_BINARY
else
    echo "package: cargo build --profile $profile --locked -p keel"
    cargo build --profile "$profile" --locked -p keel
    binary=${CARGO_TARGET_DIR:-target}/$profile/keel
fi
[ -x "$binary" ] || { echo "package: no binary at $binary" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/$name
mkdir -p "$stage/licenses" "$stage/deploy" "$work/$name-debug"

# Split the debug info out, strip the binary, and link the two.
objcopy --only-keep-debug "$binary" "$work/$name-debug/keel.debug"
objcopy --strip-debug --strip-unneeded "$binary" "$stage/keel"
objcopy --add-gnu-debuglink="$work/$name-debug/keel.debug" "$stage/keel"
chmod 0755 "$stage/keel"
"$stage/keel" --version >/dev/null

cp README.md "$stage/"
cp -r policies "$stage/"
cp -r deploy/Containerfile deploy/compose.yaml deploy/keel.service deploy/keel.env.example \
    deploy/kubernetes deploy/README.md "$stage/deploy/"
cp LICENSE "$stage/LICENSE"
cp LICENSE "$stage/licenses/keel.txt"
# Every crate compiled into the binary (cargo metadata, the same graph cargo deny checks against
# deny.toml): THIRD-PARTY.txt lists each with its licence expression, and THIRD-PARTY-TEXTS.txt
# holds the licence and notice files each crate ships (LICENSE*, LICENCE*, COPYING*, NOTICE*).
cargo metadata --format-version 1 --locked --filter-platform "$target" |
    python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
out_dir = sys.argv[1]
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(p["id"] for p in meta["packages"] if p["name"] == "keel" and p["source"] is None)
seen, todo = set(), [root]
while todo:
    current = todo.pop()
    if current in seen:
        continue
    seen.add(current)
    for dep in nodes[current]["deps"]:
        if any(kind["kind"] in (None, "normal") for kind in dep["dep_kinds"]):
            todo.append(dep["pkg"])
crates = sorted((packages[i] for i in seen if packages[i]["source"]), key=lambda p: (p["name"], p["version"]))
prefixes = ("LICENSE", "LICENCE", "COPYING", "NOTICE", "UNLICENSE")
missing = []
first_with = {}
with open(os.path.join(out_dir, "THIRD-PARTY.txt"), "w") as listing, \
        open(os.path.join(out_dir, "THIRD-PARTY-TEXTS.txt"), "w") as texts:
    print("Crates compiled into keel, with their licences (name version licence repository):", file=listing)
    print("Licence and notice files of the crates compiled into keel, as each crate ships them.", file=texts)
    for p in crates:
        print(p["name"], p["version"], p.get("license") or "see " + str(p.get("license_file")), p.get("repository") or "", file=listing)
        crate_dir = os.path.dirname(p["manifest_path"])
        files = sorted(f for f in os.listdir(crate_dir) if f.upper().startswith(prefixes) and os.path.isfile(os.path.join(crate_dir, f)))
        if p.get("license_file") and os.path.isfile(os.path.join(crate_dir, p["license_file"])):
            files = sorted(set(files) | {p["license_file"]})
        if not files:
            missing.append(p["name"])
            continue
        for f in files:
            with open(os.path.join(crate_dir, f), encoding="utf-8", errors="replace") as text:
                body = text.read()
            heading = p["name"] + " " + p["version"] + ": " + f
            print("\n" + "=" * 78 + "\n" + heading + "\n" + "=" * 78, file=texts)
            # Word for word the same text as an earlier crate: named, not repeated.
            if body in first_with:
                print("(the same text as " + first_with[body] + ")", file=texts)
            else:
                first_with[body] = heading
                texts.write(body)
    if missing:
        print("\nCrates that ship no licence file (their licence expression is in THIRD-PARTY.txt; the texts of those licences are above):", file=texts)
        print(" ".join(missing), file=texts)
' "$stage/licenses"

mkdir -p "$dist"
rm -f "$dist/$name.tar.gz" "$dist/$name-debug.tar.gz"
tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$dist/$name.tar.gz" "$name"
tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$dist/$name-debug.tar.gz" "$name-debug"
(cd "$dist" && sha256sum "$name.tar.gz" "$name-debug.tar.gz" > SHA256SUMS)

size() { du -h "$1" | cut -f1; }
echo "package: $binary $(size "$binary") -> keel $(size "$stage/keel") stripped + keel.debug $(size "$work/$name-debug/keel.debug")"
echo "package: $dist/$name.tar.gz $(size "$dist/$name.tar.gz"), $dist/$name-debug.tar.gz $(size "$dist/$name-debug.tar.gz")"
echo "package: $(wc -l < "$stage/licenses/THIRD-PARTY.txt") lines of crate licences; checksums in $dist/SHA256SUMS"
