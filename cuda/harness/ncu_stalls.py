"""Where the warps of each profiled launch wait, from an Nsight Compute report's pages
(gpu-session.sh's PROFILE_SOURCE writes both).

    python3 ncu_stalls.py RAW.csv [--with NAME,...]   # ncu -i REPORT --page raw --csv
    python3 ncu_stalls.py --source SOURCE.csv[.gz] [TOP]
                                                   # ncu -i REPORT --page source --print-source sass --csv

RAW: one JSON line per launch ("kind": "stalls"): its ID, kernel name, duration ("us", the page's
gpu__time_duration.sum, in its unit) and "stalls" {reason: cycles per issued instruction},
largest first, from the metrics `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`
(reasons at zero left out); with --with, "counters" {NAME: value} of those metrics too (the
memory counters gpu-session.sh's PROFILE_METRICS adds; a name the page lacks is an error).

SOURCE: one JSON line per launch ("kind": "sass_stalls", launches numbered from 0 in the page's
order; the page prints each launch's table twice, and a table identical to the one before it is
the same launch): the warp-state samples in all, their share per opcode (the mnemonic after any
predicate, before the first dot), and the TOP (default 12) SASS lines with the most samples: their
index in the table, text, share of the launch's samples and three largest stall reasons (samples).

A page without those metrics or columns, or without a launch, is an error: a message on stderr,
exit 2 (a profile without WarpStateStats or SourceCounters cannot say where warps wait, and an
empty answer would read as "nowhere").
"""
import collections
import csv
import gzip
import json
import re
import sys

STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
SAMPLES = "Warp Stall Sampling (All Samples)"


class Bad(Exception):
    pass


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def raw(path, keep=()):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if r[:1] == ["ID"]), None)
    if start is None:
        raise Bad(f"{path}: no header row starting with ID (not an ncu --csv page)")
    head = rows[start]
    # The units row has an empty ID.
    body = [r for r in rows[start + 1:] if r and r[0].strip() and len(r) == len(head)]
    stalls = {i: m.group(1) for i, c in enumerate(head) if (m := STALL.match(c))}
    if not stalls:
        raise Bad(f"{path}: no smsp__average_warps_issue_stalled_* metric: profile with "
                  "--section WarpStateStats")
    if not body:
        raise Bad(f"{path}: no launch in the page")
    missing = [k for k in keep if k not in head]
    if missing:
        raise Bad(f"{path}: no metric {', '.join(missing)} in the page")
    name = head.index("Kernel Name") if "Kernel Name" in head else None
    dur = head.index("gpu__time_duration.sum") if "gpu__time_duration.sum" in head else None
    for r in body:
        got = {reason: number(r[i]) or 0.0 for i, reason in stalls.items()}
        got = {k: round(v, 3) for k, v in sorted(got.items(), key=lambda kv: -kv[1])
               if round(v, 3)}
        line = {"kind": "stalls", "id": r[0], "kernel": r[name] if name is not None else None,
                "us": number(r[dur]) if dur is not None else None, "stalls": got}
        if keep:
            line["counters"] = {k: number(r[head.index(k)]) for k in keep}
        yield line


def tables(path):
    """(kernel name, header, rows) per table of a source page, repeats of a table dropped."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    out, cur = [], None
    for r in rows:
        if r[:1] == ["Kernel Name"]:
            cur = [r[1] if len(r) > 1 else "", None, []]
            out.append(cur)
        elif cur is not None and r[:2] == ["Address", "Source"]:
            cur[1] = r
        elif cur is not None and cur[1] is not None and len(r) == len(cur[1]):
            cur[2].append(r)
    kept = []
    for t in out:
        if t[1] is None or SAMPLES not in t[1]:
            raise Bad(f"{path}: a table without a {SAMPLES!r} column: profile with "
                      "--section SourceCounters")
        if not kept or kept[-1][0] != t[0] or kept[-1][2] != t[2]:
            kept.append(t)
    if not kept:
        raise Bad(f"{path}: no 'Kernel Name' table (not an ncu --page source --csv page)")
    return kept


def opcode(sass):
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def source(path, top):
    for n, (name, head, rows) in enumerate(tables(path)):
        at = head.index(SAMPLES)
        reasons = [(i, c[len("stall_"):]) for i, c in enumerate(head)
                   if c.startswith("stall_") and "Not Issued" not in c]
        samples = [number(r[at]) or 0.0 for r in rows]
        total = sum(samples) or 1.0
        by_op = collections.Counter()
        for r, s in zip(rows, samples):
            by_op[opcode(r[1])] += s
        lines = []
        for i in sorted(range(len(rows)), key=lambda i: -samples[i])[:top]:
            why = sorted(((c, number(rows[i][j]) or 0.0) for j, c in reasons), key=lambda x: -x[1])
            lines.append({"line": i, "sass": rows[i][1].strip(),
                          "share": round(samples[i] / total, 4),
                          "stalls": {c: v for c, v in why[:3] if v}})
        yield {"kind": "sass_stalls", "launch": n, "kernel": name, "samples": sum(samples),
               "by_opcode": {o: round(s / total, 4) for o, s in by_op.most_common(12)},
               "top": lines}


def main(argv):
    if len(argv) == 1:
        lines = raw(argv[0])
    elif len(argv) == 3 and argv[1] == "--with":
        lines = raw(argv[0], [k for k in argv[2].split(",") if k])
    elif argv[:1] == ["--source"] and len(argv) in (2, 3):
        if len(argv) == 3 and not argv[2].isdigit():
            raise Bad(f"TOP must be a count, not {argv[2]!r}")
        lines = source(argv[1], int(argv[2]) if len(argv) == 3 else 12)
    else:
        raise Bad("usage: ncu_stalls.py RAW.csv [--with NAME,...] | "
                  "ncu_stalls.py --source SOURCE.csv[.gz] [TOP]")
    for line in lines:
        print(json.dumps(line))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (Bad, OSError, csv.Error, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as e:
        print(f"ncu_stalls.py: {e}", file=sys.stderr)
        sys.exit(2)
