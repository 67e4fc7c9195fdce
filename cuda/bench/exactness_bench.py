#!/usr/bin/env python3
"""The exactness probe's timed runs as a benchmark file (docs/benchmarks/exactness-cuda-h200.json).

    exactness_bench.py HEADER RUNS > OUT

HEADER: the GPU session's header.json (h200-pipeline.sh: GPU, driver, clocks, nvcc, cuDNN).
RUNS: the probe's lines (cuda/bundle/exactness.sh; `#` lines skipped), runs with `timing=R`.

One row per (decoder configuration, k, policy) that was timed: k = 1 is a decode step, k > 1 a
verify of k drafted tokens (its exactness from the same run's block of k). `verify_ms` is the
forward's median, `tokens_per_s` = k / verify_ms, `sdpa_ms` the attention op alone per layer;
`vs_upstream` divides them by the upstream run of the same configuration and kernel settings,
measured in the same session. Exit 2 on input it cannot read, naming the file and line.
"""
import json
import sys


def fail(msg):
    print(f"exactness_bench.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_runs(path):
    runs = []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            run = json.loads(line)
            run["probe"]["perturbed"]
        except (ValueError, KeyError, TypeError) as e:
            fail(f"{path}:{n}: not an exactness run ({e})")
        if not run["probe"]["perturbed"]:
            runs.append(run)
    return runs


def config(run):
    d = run["probe"]["decoder"]
    cudnn = run.get("env", {}).get("MLX_CUDA_USE_CUDNN_SDPA", "1") != "0"
    return (d["preset"], d["prompt"], d.get("cache", "concat"), d["dtype"], d["dense_head"], cudnn)


def rows_of(run):
    d = run["probe"]["decoder"]
    preset, prompt, cache, dtype, dense_head, cudnn = config(run)
    blocks = {b["k"]: b for b in d["blocks"]}
    for t in d["timing"]["rows"]:
        k, b = t["k"], blocks.get(t["k"])
        yield {
            "preset": preset, "prompt": prompt, "k": k, "policy": run["policy"],
            "cache": cache, "dtype": dtype, "dense_head": dense_head, "cudnn_sdpa": cudnn,
            "logit_rows_identical": b["logit_rows_identical"] if b else None,
            "logit_rows": b["logit_rows"] if b else None,
            "tokens_same": b["tokens_same"] if b else None,
            "verify_ms": t["forward_ms"], "tokens_per_s": round(k * 1000.0 / t["forward_ms"], 1),
            "sdpa_ms": t["sdpa_ms"], "reps": d["timing"]["reps"],
        }


def main():
    if len(sys.argv) != 3:
        fail("usage: exactness_bench.py HEADER RUNS > OUT")
    try:
        header = json.load(open(sys.argv[1], encoding="utf-8"))
    except (OSError, ValueError) as e:
        fail(f"{sys.argv[1]}: not a header ({e})")
    timed = [r for r in read_runs(sys.argv[2]) if (r["probe"].get("decoder") or {}).get("timing")]
    if not timed:
        fail(f"{sys.argv[2]}: no decoder run with timing (the probe's timing=R option)")
    rows = [row for run in timed for row in rows_of(run)]
    base = {(r["preset"], r["prompt"], r["cache"], r["dtype"], r["dense_head"], r["cudnn_sdpa"], r["k"]): r
            for r in rows if r["policy"] == "upstream"}
    for r in rows:
        b = base.get((r["preset"], r["prompt"], r["cache"], r["dtype"], r["dense_head"], r["cudnn_sdpa"], r["k"]))
        if b and r["policy"] != "upstream":
            r["vs_upstream"] = {"verify": round(r["verify_ms"] / b["verify_ms"], 3),
                                "sdpa": round(r["sdpa_ms"] / b["sdpa_ms"], 3)}
    json.dump({"schema": 1, "header": header, "rows": rows}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
