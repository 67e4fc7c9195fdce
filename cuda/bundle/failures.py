#!/usr/bin/env python3
"""Compare the failing subtests of test-python.sh logs against a control run.

    failures.py CONTROL_LOG LOG [LOG ...]

CONTROL_LOG is the unpatched pin's log (control.sh, then test-python.sh pin); each LOG is a
policy's log (pytest-streamed.log, pytest-upstream.log; several logs of one policy may be given
joined by commas, their failures are united). Prints one JSON object: per log the failing
subtests by test, how many of them the control also fails, and the ones it does not (those are
the overlays' own). A whole test that fails outside its subtests (a crashed xdist worker, an
error) counts as "(whole test)". Exit 1 when any log has a failure the control does not have,
2 when a log cannot be read or holds no test result at all, else 0.
A log that ended early only shows what it reached: the JSON says whether pytest printed its
summary line ("complete") and which tests ran past pytest-timeout ("timed_out"; their subtests
after that point did not run).
"""
import json
import re
import sys
from collections import Counter

SUB = re.compile(r"SUBFAILED\((.*?)\) test_\w+\.py::\w+::(\w+)")
# A whole test in pytest's short summary: a timeout, a crashed xdist worker, an error.
WHOLE = re.compile(r"^(?:FAILED|ERROR) \S+::(\w+)(?: - (.*))?$", re.M)
SUMMARY = re.compile(r"=+ .*(passed|failed).* in [0-9.]+s")
ANY_RESULT = re.compile(r"\b(?:SUB)?(?:PASSED|FAILED)\b|^ERROR ", re.M)


class Unusable(Exception):
    pass


def read(paths):
    """Failures (test, subtest or "(whole test)"), whether every log printed its summary, and the
    tests that ran past pytest-timeout."""
    failed, complete, timed_out = set(), True, set()
    for path in paths.split(","):
        text = open(path, encoding="utf-8", errors="replace").read()
        if not ANY_RESULT.search(text):
            raise Unusable(f"{path}: no test result in it (an empty or aborted run?)")
        failed |= {(m.group(2), re.sub(r"[\s']", "", m.group(1))) for m in SUB.finditer(text)}
        for m in WHOLE.finditer(text):
            if (m.group(2) or "").startswith("Failed: Timeout"):
                timed_out.add(m.group(1))
            else:
                failed.add((m.group(1), "(whole test)"))
        complete = complete and bool(SUMMARY.search(text))
    return failed, complete, sorted(timed_out)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        return compare(argv)
    except (OSError, Unusable) as e:
        print(f"failures.py: {e}", file=sys.stderr)
        return 2


def compare(argv):
    control, control_complete, control_timeouts = read(argv[1])
    report = {"schema": 1, "control": {"log": argv[1], "complete": control_complete,
                                       "timed_out": control_timeouts,
                                       "failed": len(control),
                                       "by_test": dict(sorted(Counter(t for t, _ in control).items()))}}
    own = 0
    for paths in argv[2:]:
        failed, complete, timeouts = read(paths)
        extra = sorted(failed - control)
        own += len(extra)
        report[paths] = {"complete": complete, "timed_out": timeouts, "failed": len(failed),
                         "by_test": dict(sorted(Counter(t for t, _ in failed).items())),
                         "also_failed_by_control": len(failed & control),
                         "not_failed_by_control": [f"{t} {s}" for t, s in extra]}
    print(json.dumps(report, indent=1))
    return 1 if own else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
