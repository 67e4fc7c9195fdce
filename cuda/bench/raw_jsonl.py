"""A GPU call's raw records as one JSONL file for docs/benchmarks/, its first line the machine.

    raw_jsonl.py OUT.jsonl env.txt WHAT IN.jsonl...

Line 1: {"kind": "env", "gpu", "driver", "clocks", "nvcc", "cmake" (collect.py's header of the
call's env.txt), "what": WHAT (which call, which overlay, which modes)}. Then every JSON line of
each IN in order; lines that are not JSON (a summary table, a shell message) are left out and
counted on stderr. A missing or unreadable input, an env.txt without its two CSV lines, or an
IN with no JSON line is a message and exit 2, and OUT is not written; OUT is written whole or
not at all (a temporary file renamed over it)."""
import json
import os
import sys

from collect import read_header


def fail(msg):
    print(f"raw_jsonl.py: {msg}", file=sys.stderr)
    sys.exit(2)


def header(env, what):
    try:
        h = read_header(env)
    except OSError as e:
        fail(f"{env}: {e.strerror}: pass the env.txt the call wrote into $OUT")
    except IndexError:
        fail(f"{env}: no nvidia-smi CSV header and row on lines 1-2: is it a call's env.txt?")
    if not h["gpu"]:
        fail(f"{env}:2: no GPU name in nvidia-smi's row: is it a call's env.txt?")
    return {"kind": "env", **h, "what": what}


def records(path):
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail(f"{path}: {e.strerror}: pass the call's files (under files_at)")
    kept, dropped = [], 0
    for line in lines:
        try:
            json.loads(line)
            kept.append(line.strip())
        except ValueError:
            dropped += line.strip() != ""
    if not kept:
        fail(f"{path}: no JSON line: is it a harness's output?")
    if dropped:
        print(f"raw_jsonl.py: {path}: {dropped} line(s) not JSON left out", file=sys.stderr)
    return kept


def main(argv):
    if len(argv) < 4:
        fail("usage: raw_jsonl.py OUT.jsonl env.txt WHAT IN.jsonl...")
    out, env, what, inputs = argv[0], argv[1], argv[2], argv[3:]
    lines = [json.dumps(header(env, what))]
    for path in inputs:
        lines += records(path)
    tmp = f"{out}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, out)
    print(f"{out}: {len(lines)} lines", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
