#!/usr/bin/env python3
"""Where a build's time went, from Ninja's log (`BUILD/.ninja_log`).

    ninja_times.py LOG [TOP]

Ninja appends one line per edge it finished, `start_ms end_ms mtime output hash` (tab-separated,
after a `# ninja log vN` header), in the order they finished, with times from the start of its
own invocation. A build resumed in a later command (a call cut at its limit) is a second
invocation: its times start again from zero, so a line that ends more than a second before the
line above it starts a new run (a log Ninja has recompacted is out of order and reads as many
runs). Per run, this prints its wall time (the last end), the edge time summed (and so the cores
busy on average), the TOP longest edges (default 8) with when each ended, and the edge that
ended last. An edge with several outputs (one line each, same times and command hash) counts
once. Exit 2 on a file that is not a Ninja log, naming its line.
"""
import sys

# Edges finishing together may be logged a little out of order: only an end this much before the
# line above's starts a new run.
SLACK_MS = 1000


def runs_of(path):
    """The log's runs: lists of (start_ms, end_ms, output, command hash), in the order they
    finished."""
    runs, last_end = [], None
    with open(path) as f:
        head = f.readline()
        if not head.startswith("# ninja log v"):
            raise ValueError(f"{path}:1: not a Ninja log (no '# ninja log v' header)")
        for n, line in enumerate(f, start=2):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4 or not parts[0].isdigit() or not parts[1].isdigit():
                raise ValueError(f"{path}:{n}: expected 'start end mtime output hash', tab-separated")
            start, end = int(parts[0]), int(parts[1])
            if last_end is None or end + SLACK_MS < last_end:
                runs.append([])
            last_end = end
            runs[-1].append((start, end, parts[3], parts[4] if len(parts) > 4 else ""))
    return runs


def edges(run):
    """One record per edge: the outputs of one command share its times and its hash."""
    seen, out = set(), []
    for start, end, name, h in run:
        if (start, end, h) in seen:
            continue
        seen.add((start, end, h))
        out.append((start, end, name))
    return out


def report(run, top):
    es = edges(run)
    wall = max(e for _, e, _ in es)
    busy = sum(e - s for s, e, _ in es)
    lines = [f"{len(es)} edges, {wall / 1000:.1f} s wall, {busy / 1000:.1f} s of edges "
             f"({busy / max(wall, 1):.1f} busy on average)"]
    for s, e, name in sorted(es, key=lambda x: x[0] - x[1])[:top]:
        lines.append(f"  {(e - s) / 1000:7.1f} s  {name}  (ended at {e / 1000:.1f} s)")
    s, e, name = max(es, key=lambda x: x[1])
    lines.append(f"  last to end: {name} ({(e - s) / 1000:.1f} s, from {s / 1000:.1f} s)")
    return lines


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        print("usage: ninja_times.py LOG [TOP]", file=sys.stderr)
        return 2
    try:
        runs = runs_of(argv[1])
    except (OSError, ValueError) as e:
        print(f"ninja_times.py: {e}", file=sys.stderr)
        return 2
    top = int(argv[2]) if len(argv) == 3 else 8
    for i, run in enumerate(runs, start=1):
        print(f"ninja run {i} of {len(runs)}: " + "\n".join(report(run, top)))
    if not runs:
        print("ninja: the log has no edges")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
