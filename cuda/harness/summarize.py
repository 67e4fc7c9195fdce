"""Print a compact table of a harness.jsonl (+ peers.jsonl): per bits/shape/M, upstream qmv,
each streamed launch shape, and peers, in microseconds; ratio columns are over upstream's M = 1."""
import collections
import json
import sys

rows = collections.defaultdict(dict)
import os
for path in [p for p in sys.argv[1:] if os.path.exists(p)]:
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("kind") == "bench":
            bits = 4 if r["arm"] in ("tinygemm",) else r["bits"]
            rows[(bits, r["n"], r["k"], r["m"])][r["arm"]] = r["us"]
        elif r.get("kind") != "bench":
            print(line.strip())
arms = sorted({a for v in rows.values() for a in v})
print("bits n k m " + " ".join(arms))
for key in sorted(rows):
    v = rows[key]
    base = rows.get((key[0], key[1], key[2], 1), {}).get("upstream_qmv")
    cells = []
    for a in arms:
        t = v.get(a)
        cells.append("-" if t is None else (f"{t:.1f}" + (f"({t / base:.2f}x)" if base and a != "dense_bf16" else "")))
    print(*key, *cells)
