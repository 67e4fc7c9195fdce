"""Print the headline metrics of an Nsight Compute CSV (gpu-session.sh's profile phase), one line
per kernel launch, and the warp stall reasons of the launches whose name matches ARG 2.

    ncu_summary.py ncu.csv [kernel-substring]"""
import collections
import csv
import sys

WANT = ["Duration", "DRAM Throughput", "Memory Throughput", "L2 Hit Rate", "L1/TEX Hit Rate",
        "Achieved Occupancy", "Theoretical Occupancy", "Registers Per Thread", "No Eligible",
        "Issued Warp Per Scheduler", "Compute (SM) Throughput", "Mem Busy", "Max Bandwidth",
        "Warp Cycles Per Issued Instruction", "smsp__inst_executed.sum"]


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    sub = sys.argv[2] if len(sys.argv) > 2 else None
    # ncu prints its ==PROF== lines (and the target's stdout) ahead of the CSV header.
    rows = rows[next(i for i, r in enumerate(rows) if r[:1] == ["ID"]):]
    h = rows[0]
    ki, ii, mi, vi, ui = (h.index(c) for c in ("Kernel Name", "ID", "Metric Name", "Metric Value",
                                               "Metric Unit"))
    out = collections.OrderedDict()
    stalls = collections.defaultdict(list)
    for r in rows[1:]:
        if len(r) <= vi:
            continue
        key = (r[ii], r[ki][:48])
        if r[mi] in WANT:
            out.setdefault(key, []).append(f"{r[mi]}={r[vi]}{r[ui]}")
        if sub and sub in r[ki] and "Stall" in r[mi]:
            stalls[key].append(f"{r[mi]}={r[vi]}")
    for k, v in out.items():
        print(*k, "; ".join(v))
    for k, v in stalls.items():
        print(*k, "; ".join(v))


if __name__ == "__main__":
    main()
