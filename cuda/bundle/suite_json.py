#!/usr/bin/env python3
"""The results JSON of suite.sh runs, and the fork-vs-pin comparison in it.

    suite_json.py OUT.json HEADER.json POLICY:DEVICE:DIR [POLICY:DEVICE:DIR ...]

HEADER.json: an object naming the machine (GPU, driver, nvcc, clocks...), copied as "header".
Each POLICY:DEVICE:DIR is one suite.sh output folder (POLICY upstream, streamed, invariant or pin; DEVICE
gpu or cpu). Writes {schema: 1, header, runs: [{policy, device, files: [...], tests: [{id,
outcome, reason?, subtests_failed?}]}], comparison: [...]}. A test's outcome is one of passed,
failed, error, skipped, crashed, timeout:
- failed: its call failed, or any of its subtests did; error: its setup or teardown failed;
- crashed: it started and its process ended with no result for it (a segfault, an abort);
- timeout: pytest-timeout stopped it, or it was the test running when its file ran out of time
  (suite.sh's per-file limit: rc 124 or 137);
- a file whose process ended before any test started has one entry with the file's name as id:
  error (pytest reported a collection error), timeout, or crashed.
Tests a file collected but never reached (after a crash or its time limit) are counted in its
"files" entry as not_run, and are not in "tests". C++ tests (cpp.xml) have ids
"cpp::FILE::CASE" (with no cpp.rc the binary had not ended: its open case is left out and its
"files" entry says complete: false; a case doctest closed on a signal is a timeout when the file ran
out of time, else crashed). The comparison: for every run of a policy whose device also has a pin run,
"regressions" are the ids the policy fails (failed, error, crashed, timeout) that pass at the pin
(the only thing that fails it), "fixed" the reverse, "only_here" the ids the pin has no result
for, "flaky" the ids (of either run) that failed or crashed on their first attempt and passed when their
file ran again (DIR/first/ holds a first attempt: files that ran out of time or had failures; such
a test carries first_outcome). Exit 1 when there is a regression, 2 on unusable input, else 0.
"""
import html
import json
import os
import re
import sys

BAD = {"failed", "error", "crashed", "timeout"}
OUT_OF_TIME = {124, 137}


def read_rc(path):
    try:
        parts = open(path, encoding="utf-8").read().split()
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else None
    except (OSError, ValueError, IndexError):
        return None, None


def short(nodeid):
    """test_x.py::Case::test_y, whatever folder pytest's rootdir put before the file."""
    path, sep, rest = nodeid.partition("::")
    return os.path.basename(path) + sep + rest


def python_file(d, name):
    """(files entry, tests) of one test file's jsonl, rc and log."""
    rc, secs = read_rc(os.path.join(d, name + ".rc"))
    collected, started, reports = [], [], {}
    path = os.path.join(d, name + ".jsonl")
    lines = open(path, encoding="utf-8").read().splitlines() if os.path.exists(path) else []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the last line of a process killed while writing it
        if "collected" in rec:
            collected = [short(c) for c in rec["collected"]]
        elif "start" in rec:
            started.append(short(rec["start"]))
        elif "id" in rec:
            rec["id"] = short(rec["id"])
            reports.setdefault(rec["id"], []).append(rec)
    tests = []
    for tid in dict.fromkeys(started + list(reports)):
        reps = reports.get(tid, [])
        t = {"id": tid}
        by = {}
        for r in reps:
            if "subtest" not in r:
                by[r["when"]] = r
        subfail = [r for r in reps if "subtest" in r and r["outcome"] == "failed"]
        setup, call, teardown = by.get("setup"), by.get("call"), by.get("teardown")
        timed = [r for r in reps if r.get("timeout")]
        if timed:
            t["outcome"] = "timeout"
            t["reason"] = timed[0].get("reason", "")
        elif setup and setup["outcome"] == "failed":
            t["outcome"], t["reason"] = "error", setup.get("reason", "")
        elif setup and setup["outcome"] == "skipped":
            t["outcome"], t["reason"] = "skipped", setup.get("reason", "")
        elif call is None:
            t["outcome"] = "timeout" if rc in OUT_OF_TIME else "crashed"
            if subfail:
                t["subtests_failed"] = len(subfail)
        elif call["outcome"] == "failed" or subfail:
            t["outcome"] = "failed"
            t["reason"] = (call.get("reason") if call["outcome"] == "failed" else None) or \
                (subfail[0].get("reason", "") if subfail else "")
            if subfail:
                t["subtests_failed"] = len(subfail)
        elif call["outcome"] == "skipped":
            t["outcome"], t["reason"] = "skipped", call.get("reason", "")
        elif teardown and teardown["outcome"] == "failed":
            t["outcome"], t["reason"] = "error", teardown.get("reason", "")
        else:
            t["outcome"] = "passed"
        if not t.get("reason"):
            t.pop("reason", None)
        tests.append(t)
    if not tests and rc != 0:
        log = os.path.join(d, name + ".log")
        text = open(log, encoding="utf-8", errors="replace").read() if os.path.exists(log) else ""
        if rc in OUT_OF_TIME:
            outcome = "timeout"
        elif rc is None or rc >= 128 or rc < 0:
            outcome = "crashed"  # a signal (or no rc file: the run itself was cut)
        else:
            outcome = "error"  # pytest's own exit: a collection or usage error
        last = [ln for ln in text.splitlines() if ln.strip()][-1:] or [""]
        tests.append({"id": name + ".py", "outcome": outcome, "reason": last[0].strip("= ")[:300]})
    seen = {t["id"] for t in tests}
    entry = {
        "file": name + ".py",
        "rc": rc,
        "seconds": secs,
        "collected": len(collected),
        "not_run": len([c for c in collected if c not in seen]),
    }
    return entry, tests


CASE = re.compile(r'<TestCase\s+name="([^"]*)"(?:\s+filename="([^"]*)")?[^>]*?(/?)>')
RESULT = re.compile(r'test_case_success="(true|false)"')
CRASH = re.compile(r'<Exception crash="true">([^<]*)</Exception>')


def cpp_tests(d):
    """(files entry, tests) of cpp.xml, or (None, []) when there is none."""
    path = os.path.join(d, "cpp.xml")
    if not os.path.exists(path):
        return None, []
    rc, secs = read_rc(os.path.join(d, "cpp.rc"))
    text = open(path, encoding="utf-8", errors="replace").read()
    tests, cur = [], None
    pos = 0
    while True:
        m = CASE.search(text, pos)
        nxt = m.start() if m else len(text)
        if cur is not None:
            r = RESULT.search(text, pos, nxt)
            if r and CRASH.search(text, pos, nxt):
                # doctest's signal handler closed the case: SIGTERM from the file's time limit
                # (rc 124) is a timeout, any other signal a crash.
                cur["outcome"] = "timeout" if rc in OUT_OF_TIME else "crashed"
                cur["reason"] = " ".join(CRASH.search(text, pos, nxt).group(1).split())[:200]
                tests.append(cur)
            elif r:
                cur["outcome"] = "passed" if r.group(1) == "true" else "failed"
                tests.append(cur)
            elif rc is not None:
                cur["outcome"] = "timeout" if rc in OUT_OF_TIME else "crashed"
                tests.append(cur)
            # No cpp.rc: the binary was still running when its results were read; the open case
            # has no outcome yet.
            cur = None
        if not m:
            break
        name = html.unescape(m.group(1))
        fname = os.path.basename(html.unescape(m.group(2) or ""))
        tid = f"cpp::{fname}::{name}"
        tag = m.group(0)
        if m.group(3) == "/" or 'skipped="true"' in tag:
            tests.append({"id": tid, "outcome": "skipped", "reason": "filtered (-sfe)"})
        else:
            cur = {"id": tid}
        pos = m.end()
    if not tests and rc != 0:
        tests.append({"id": "cpp", "outcome": "timeout" if rc in OUT_OF_TIME else "crashed"})
    return {"file": "cpp", "rc": rc, "seconds": secs, "collected": len(tests), "not_run": 0,
            "complete": rc is not None}, tests


def first_attempt(entry, tests):
    return {"rc": entry["rc"], "seconds": entry["seconds"], "counts": counts(tests)}


def with_first(tests, first):
    """Marks each test whose first attempt had another outcome with it (first_outcome), and
    passes the first attempt's (entry, tests) on."""
    before = {t["id"]: t["outcome"] for t in first[1]}
    for t in tests:
        o = before.get(t["id"])
        if o is not None and o != t["outcome"]:
            t["first_outcome"] = o
    return first


def run_of(spec):
    try:
        policy, device, d = spec.split(":", 2)
    except ValueError:
        raise SystemExit(f"suite_json.py: {spec}: want POLICY:DEVICE:DIR")
    if policy not in ("upstream", "streamed", "invariant", "pin") or device not in ("gpu", "cpu"):
        raise SystemExit(
            f"suite_json.py: {spec}: policy upstream|streamed|invariant|pin, device gpu|cpu"
        )
    if not os.path.isdir(d):
        raise SystemExit(f"suite_json.py: {d}: no such folder")
    files, tests = [], []
    first = os.path.join(d, "first")
    for name in sorted(f[:-3] for f in os.listdir(d) if f.endswith(".rc") and f != "cpp.rc"):
        entry, t = python_file(d, name)
        if os.path.exists(os.path.join(first, name + ".rc")):
            entry["first_attempt"] = first_attempt(*with_first(t, python_file(first, name)))
        files.append(entry)
        tests.extend(t)
    entry, t = cpp_tests(d)
    if entry:
        if os.path.exists(os.path.join(first, "cpp.rc")):
            entry["first_attempt"] = first_attempt(*with_first(t, cpp_tests(first)))
        files.append(entry)
        tests.extend(t)
    if not files:
        raise SystemExit(f"suite_json.py: {d}: no suite.sh results")
    return {"policy": policy, "device": device, "files": files, "tests": tests}


def counts(tests):
    c = {}
    for t in tests:
        c[t["outcome"]] = c.get(t["outcome"], 0) + 1
    return c


def compare(runs):
    out = []
    for r in runs:
        if r["policy"] == "pin":
            continue
        pin = next((p for p in runs if p["policy"] == "pin" and p["device"] == r["device"]), None)
        if pin is None:
            continue
        at_pin = {t["id"]: t["outcome"] for t in pin["tests"]}
        here = {t["id"]: t["outcome"] for t in r["tests"]}
        out.append({
            "policy": r["policy"],
            "device": r["device"],
            "regressions": sorted(i for i, o in here.items() if o in BAD and at_pin.get(i) == "passed"),
            "fixed": sorted(i for i, o in here.items() if o == "passed" and at_pin.get(i) in BAD),
            "only_here": sorted(i for i in here if i not in at_pin),
            # Failed on the first attempt, passed when its file ran again: not a regression, but
            # named (either side). A first timeout is the cold NVRTC cache's, not the test's.
            "flaky": sorted(t["id"] for t in r["tests"] + pin["tests"]
                            if t["outcome"] == "passed"
                            and t.get("first_outcome") in BAD - {"timeout"}),
        })
    return out


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        header = json.load(open(argv[2], encoding="utf-8"))
        runs = [run_of(s) for s in argv[3:]]
    except (OSError, ValueError) as e:
        print(f"suite_json.py: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    for r in runs:
        r["counts"] = counts(r["tests"])
    comparison = compare(runs)
    doc = {"schema": 1, "header": header, "runs": runs, "comparison": comparison}
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for r in runs:
        print(f"{r['policy']}/{r['device']}: {r['counts']}")
    for c in comparison:
        print(f"{c['policy']}/{c['device']} vs pin: {len(c['regressions'])} regressions, "
              f"{len(c['fixed'])} fixed, {len(c['only_here'])} not at the pin, "
              f"{len(c['flaky'])} passed only when run again")
    return 1 if any(c["regressions"] for c in comparison) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
