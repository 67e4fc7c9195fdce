"""Combine a GPU run's outputs into one results JSON (schema 1) for `cargo xtask bench qmv-cuda`.

    collect.py OUT.json env.txt lib-parity.jsonl lib-bench.jsonl harness.jsonl peers.jsonl marlin.jsonl

Header: GPU name, driver, nvcc, clocks, copy ceiling. "parity": the harnesses' summary records as
they printed them (parity, lib_parity, negative_control; the invariant kernel's inv_parity,
inv_negative_control and one inv_accuracy per dtype, bits and group size), Marlin's
marlin_error and marlin_control records, and one marlin_sanity record summing Marlin's per-shape
sanity checks (shapes, ok, the (n, k) that failed). Rows: one per (dtype, bits, gs, n, k, m) with
each arm's microseconds under "arms", its weight bytes under "bytes" and, where the run measured
it, "bit_identical" per arm (row 0 at M vs M = 1: the peers', Marlin's) and "rows_differ" per arm
(how many of the M rows differ from the same row alone at M = 1: Marlin's).

The main config is the (dtype, gs) most bench records have: the library's and the kernel
harness's (bfloat16, gs 64). An arm measured in one other config only (Marlin: float16, gs 128,
what it supports) goes into the main config's row of the same bits, N, K and M, and the row says
so: "arm_config": {"marlin": {"dtype": "float16", "gs": 128}}. An arm measured in several configs
keeps rows of its own."""
import collections
import json
import os
import sys

SUMMARY_KINDS = ("parity", "lib_parity", "negative_control", "inv_parity", "inv_negative_control",
                 "inv_accuracy", "marlin_error", "marlin_control")


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


def read_header(env):
    lines = [l.strip() for l in open(env)]
    gpu = dict(zip([h.strip() for h in lines[0].split(",")], [v.strip() for v in lines[1].split(",")]))
    return {
        "gpu": gpu.get("name"),
        "driver": gpu.get("driver_version"),
        "clocks": {k: v for k, v in gpu.items() if k.startswith("clocks")},
        "nvcc": next((l for l in lines if l.startswith("Cuda compilation") or l.startswith("Build cuda")), None),
        "cmake": next((l for l in lines if l.startswith("cmake version")), None),
    }


def config(r):
    return (r["dtype"], r["gs"])


def filed_configs(bench):
    """Per arm measured in one config that is not the main one: the main config, its rows' config."""
    counts = collections.Counter(config(r) for r in bench)
    if not counts:
        return {}
    main = min(counts, key=lambda c: (-counts[c], str(c)))
    arms = collections.defaultdict(set)
    for r in bench:
        arms[r["arm"]].add(config(r))
    return {arm: main for arm, cs in arms.items() if len(cs) == 1 and main not in cs}


def add_bench(rows, r, filed):
    dtype, gs = filed.get(r["arm"], config(r))
    bits = r["bits"] if r["arm"] != "dense_bf16" else None
    for b in [bits] if bits else [4, 8]:
        key = (dtype, b, gs, r["n"], r["k"], r["m"])
        row = rows.setdefault(key, {"dtype": dtype, "bits": b, "gs": gs, "n": key[3],
                                    "k": key[4], "m": key[5], "arms": {}, "bytes": {}})
        row["arms"][r["arm"]] = r["us"]
        row["bytes"][r["arm"]] = r["bytes"]
        if r["arm"] in filed:
            row.setdefault("arm_config", {})[r["arm"]] = {"dtype": r["dtype"], "gs": r["gs"]}
        if "row0_bit_identical" in r:
            row.setdefault("bit_identical", {})[r["arm"]] = r["row0_bit_identical"]
        if "rows_differ" in r:
            row.setdefault("rows_differ", {})[r["arm"]] = r["rows_differ"]


def sanity_summary(checks):
    """Marlin's per-shape sanity records as one: how many shapes, how many ok, which failed."""
    failed = [[c["n"], c["k"]] for c in checks if not c.get("ok")]
    return {"kind": "marlin_sanity", "shapes": len(checks), "ok": len(checks) - len(failed), "failed": failed}


def main():
    out, env, *paths = sys.argv[1:]
    header = read_header(env)
    parity, bench, checks = [], [], []
    for p in paths:
        for r in records(p):
            kind = r.get("kind")
            if kind == "copy_ceiling":
                header["copy_ceiling_gbps"] = r["gbps"]
            elif kind in SUMMARY_KINDS:
                parity.append(r)
            elif kind == "marlin_sanity":
                checks.append(r)
            elif kind == "bench":
                bench.append(r)
    if checks:
        parity.append(sanity_summary(checks))
    rows = {}
    filed = filed_configs(bench)
    for r in bench:
        add_bench(rows, r, filed)
    result = {"schema": 1, "header": header, "parity": parity, "rows": [rows[k] for k in sorted(rows, key=str)]}
    json.dump(result, open(out, "w"), indent=1)
    print(f"{out}: {len(result['rows'])} rows")


if __name__ == "__main__":
    main()
