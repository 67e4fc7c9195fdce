"""Combine a GPU run's outputs into one results JSON (schema 1) for `cargo xtask bench qmv-cuda`.

    collect.py OUT.json env.txt lib-parity.jsonl lib-bench.jsonl harness.jsonl peers.jsonl

Header: GPU name, driver, nvcc, clocks, copy ceiling. "parity": the harnesses' summary records as
they printed them (parity, lib_parity, negative_control; the invariant kernel's inv_parity,
inv_negative_control and one inv_accuracy per dtype, bits and group size). Rows: one per
(dtype, bits, gs, n, k, m) with each arm's microseconds under "arms" and, where the run measured
it, "bit_identical" per arm (the peers' row 0 at M vs M = 1)."""
import json
import os
import sys


def records(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def main():
    out, env, *paths = sys.argv[1:]
    lines = [l.strip() for l in open(env)]
    gpu = dict(zip([h.strip() for h in lines[0].split(",")], [v.strip() for v in lines[1].split(",")]))
    header = {
        "gpu": gpu.get("name"),
        "driver": gpu.get("driver_version"),
        "clocks": {k: v for k, v in gpu.items() if k.startswith("clocks")},
        "nvcc": next((l for l in lines if l.startswith("Cuda compilation") or l.startswith("Build cuda")), None),
        "cmake": next((l for l in lines if l.startswith("cmake version")), None),
    }
    rows = {}
    parity = []
    for p in paths:
        for r in records(p):
            kind = r.get("kind")
            if kind == "copy_ceiling":
                header["copy_ceiling_gbps"] = r["gbps"]
            elif kind in ("parity", "lib_parity", "negative_control", "inv_parity",
                          "inv_negative_control", "inv_accuracy"):
                parity.append(r)
            elif kind == "bench":
                bits = r["bits"] if r["arm"] != "dense_bf16" else None
                keys = [bits] if bits else [4, 8]
                for b in keys:
                    key = (r["dtype"], b, r["gs"], r["n"], r["k"], r["m"])
                    row = rows.setdefault(key, {"dtype": key[0], "bits": b, "gs": key[2], "n": key[3],
                                                "k": key[4], "m": key[5], "arms": {}, "bytes": {}})
                    row["arms"][r["arm"]] = r["us"]
                    row["bytes"][r["arm"]] = r["bytes"]
                    if "row0_bit_identical" in r:
                        row.setdefault("bit_identical", {})[r["arm"]] = r["row0_bit_identical"]
    result = {"schema": 1, "header": header, "parity": parity, "rows": [rows[k] for k in sorted(rows, key=str)]}
    json.dump(result, open(out, "w"), indent=1)
    print(f"{out}: {len(result['rows'])} rows")


if __name__ == "__main__":
    main()
