#!/usr/bin/env bash
# The control run: the bundle's built tree taken back to the unpatched pin, rebuilt in the same
# build folder (only what the series touched recompiles), then MLX's Python tests again with no
# policy (test-python.sh pin): failures that remain are upstream's own.
#
#   control.sh OVERLAY_DIR [--forward]
#     OVERLAY_DIR: this checkout's overlays/mlx (series + patches). Reverts the series, last
#     overlay first, and checks every file it touched against the pin's blob named in the
#     overlays' index lines (a file the series adds must be gone). --forward applies the series
#     again (back to the patched tree). Both rebuild and reinstall with build.sh's folders, unless
#     NO_BUILD=1 (the tree alone: what CI checks).
set -euo pipefail
bundle=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(cd "${1:?overlay folder}" && pwd)
# git apply and hash-object on the bundle's tree alone, even when the bundle lies inside a git
# work tree (git apply would take paths from that repository's top).
export GIT_CEILING_DIRECTORIES=$bundle
case "${2:-}" in
  ""|--forward) ;;
  *) echo "control.sh: unknown argument ${2} (only --forward)" >&2; exit 2 ;;
esac
[ -f "$dir/series" ] || { echo "control.sh: $dir/series: no such file" >&2; exit 2; }
mapfile -t series < <(grep -v '^\s*#' "$dir/series" | sed '/^\s*$/d')
[ ${#series[@]} -gt 0 ] || { echo "control.sh: $dir/series lists no overlay" >&2; exit 2; }
cd "$bundle/mlx"
if [ "${2:-}" = --forward ]; then
  for p in "${series[@]}"; do git apply "$dir/$p"; done
  echo "control: series applied again (${#series[@]} overlays)"
else
  for (( i=${#series[@]}-1; i>=0; i-- )); do git apply -R "$dir/${series[$i]}"; done
  python3 - "$dir" "${series[@]}" <<'PY'
import codecs, os, re, subprocess, sys
d, series = sys.argv[1], sys.argv[2:]


def unquote(name):
    # git writes a name with special characters C-quoted ("a/caf\303\251.c") and ends one with a
    # space with a tab.
    name = name.rstrip("\n").rstrip("\t")
    if len(name) > 1 and name[0] == name[-1] == '"':
        name = codecs.escape_decode(name[1:-1].encode())[0].decode("utf-8", "surrogateescape")
    return name


def sections(path):
    """Each file section of a patch: its pre-image path (or the post-image's, for an added file)
    and the pre-image blob of its index line. The headers come before the hunks, so the first
    ---/+++ line of a section is its header even when a hunk removes a line starting '-- '."""
    cur = None
    for line in open(path, encoding="utf-8", errors="surrogateescape"):
        if line.startswith("diff --git "):
            if cur:
                yield cur
            cur = {}
        elif cur is None:
            continue
        elif line.startswith("index ") and "pre" not in cur:
            m = re.match(r"index ([0-9a-f]+)\.\.", line)
            if m:
                cur["pre"] = m.group(1)
        elif line.startswith("--- ") and "old" not in cur:
            cur["old"] = unquote(line[4:])
        elif line.startswith("+++ ") and "new" not in cur:
            cur["new"] = unquote(line[4:])
    if cur:
        yield cur


first = {}
for p in series:
    for sec in sections(os.path.join(d, p)):
        old, new = sec.get("old"), sec.get("new")
        name = old[2:] if old and old.startswith("a/") else (new[2:] if new and new.startswith("b/") else None)
        if name and "pre" in sec and name not in first:
            first[name] = sec["pre"]
bad = []
for f, pre in sorted(first.items()):
    if set(pre) == {"0"}:
        if os.path.exists(f):
            bad.append(f"{f}: added by the series, still there")
        continue
    h = subprocess.run(["git", "hash-object", f], capture_output=True, text=True).stdout.strip()
    if not h.startswith(pre):
        bad.append(f"{f}: {h[:12]} is not the pin's {pre}")
for b in bad:
    print("control:", b, file=sys.stderr)
print(f"control: {len(first) - len(bad)} of {len(first)} touched files are the pin's")
sys.exit(1 if bad else 0)
PY
fi
[ "${NO_BUILD:-0}" = 1 ] && exit 0
ninja -C "${BUILD_DIR:-$bundle/build}" -j "${JOBS:-$(nproc)}" | tail -2
cmake --install "${BUILD_DIR:-$bundle/build}" > /dev/null
