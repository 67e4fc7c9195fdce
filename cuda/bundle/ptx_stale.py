#!/usr/bin/env python3
"""Drops the entries of MLX's NVRTC (PTX) caches that headers changed since they were written.

    ptx_stale.py sums ROOTS > SUMS
    ptx_stale.py drop OLD_SUMS NEW_SUMS ROOTS CACHE_DIR [CACHE_DIR ...]

ROOTS: the folders NVRTC's headers come from, joined by ":": MLX embeds
mlx/backend/cuda/device/*.h and *.cuh in its library (the source tree's copies, at build time)
and finds the rest (CUTLASS, CCCL) in the folder include/ beside it.

MLX keys its PTX cache (MLX_PTX_CACHE_DIR) by module name alone. A kernel compiled from the same
source text against other JIT-visible headers (an overlay that changes mlx/backend/cuda/device/,
the tree taken back to the pin, a series that moved between two runs) keeps its name, so a cache
shared between the fork and the pin, or carried from an earlier run, would hand one tree the
other's kernel. `sums` writes "SHA256  ROOT/PATH" for every header under each root (ROOT: the
root's own name). `drop` takes the headers whose sums differ between OLD and
NEW (or that only one has), adds every header that includes one of them (by file name, so it
drops more rather than less), and removes each cache entry (NAME.ptx, NAME.txt, NAME.cu) whose
saved source (NAME.cu) includes any of them; an entry without its .cu cannot be judged and goes
too. Prints what it dropped; exit 2 on unusable input.
"""
import hashlib
import os
import re
import sys

HEADER = (".h", ".hpp", ".cuh", ".inl")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def headers(roots):
    for root in roots.split(":"):
        if not os.path.isdir(root):
            raise SystemExit(f"ptx_stale.py: {root}: no such folder")
        top = os.path.basename(os.path.normpath(root))
        for d, _, names in os.walk(root):
            for n in names:
                if n.endswith(HEADER):
                    p = os.path.join(d, n)
                    yield os.path.join(top, os.path.relpath(p, root)), p


def sums(roots):
    for rel, p in sorted(headers(roots)):
        with open(p, "rb") as f:
            print(f"{hashlib.sha256(f.read()).hexdigest()}  {rel}")


def read_sums(path):
    out = {}
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        parts = line.rstrip("\n").split("  ", 1)
        if len(parts) != 2 or len(parts[0]) != 64:
            raise SystemExit(f"ptx_stale.py: {path}:{i}: not a 'SHA256  PATH' line")
        out[parts[1]] = parts[0]
    return out


def includes(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    return {os.path.basename(m) for m in INCLUDE.findall(text)}


def stale_names(old, new, root):
    changed = {os.path.basename(p) for p in set(old) | set(new) if old.get(p) != new.get(p)}
    graph = {os.path.basename(rel): includes(p) for rel, p in headers(root)}
    grew = True
    while grew:
        more = {h for h, inc in graph.items() if h not in changed and inc & changed}
        changed |= more
        grew = bool(more)
    return changed


def drop(old, new, root, caches):
    changed = stale_names(read_sums(old), read_sums(new), root)
    if not changed:
        print("ptx_stale: no header changed; nothing dropped")
        return 0
    dropped = 0
    for cache in caches:
        for d, _, names in os.walk(cache):
            for n in names:
                if not n.endswith(".ptx"):
                    continue
                stem = os.path.join(d, n[:-4])
                cu = stem + ".cu"
                if os.path.exists(cu) and not includes(cu) & changed:
                    continue
                for ext in (".ptx", ".txt", ".cu"):
                    if os.path.exists(stem + ext):
                        os.remove(stem + ext)
                dropped += 1
    print(f"ptx_stale: {len(changed)} header(s) changed or include one "
          f"({', '.join(sorted(changed)[:8])}{', ...' if len(changed) > 8 else ''}); "
          f"{dropped} cache entr{'y' if dropped == 1 else 'ies'} dropped")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "sums":
        try:
            sums(argv[2])
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
        return 0
    if len(argv) >= 6 and argv[1] == "drop":
        try:
            return drop(argv[2], argv[3], argv[4], [c for c in argv[5:] if os.path.isdir(c)])
        except OSError as e:
            print(f"ptx_stale.py: {e}", file=sys.stderr)
            return 2
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
    print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
    print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
