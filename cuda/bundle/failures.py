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
after that point did not run). A subtest that pytest-timeout stopped midway is "interrupted", not
failed: its progress line carries the unraisable-exception warning that unittest's subTest raises
when its test was stopped (there is no result to compare). "not_run_by_control" names the tests
with failures that the control log never ran at all: nothing there to attribute them to.
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
# Any result of a test, whole or subtest: the tests a log ran.
RAN = re.compile(r"(?:PASSED|FAILED|SKIPPED)(?:\(.*?\))? test_\w+\.py::\w+::(\w+)")
# Printed on a subtest's progress line when pytest-timeout stopped its test inside the subtest.
STOPPED = "unraisableexception"


class Unusable(Exception):
    pass


class Log:
    """What one policy's logs (paths joined by commas) say."""

    def __init__(self, paths):
        self.failed, self.interrupted, self.timed_out, self.ran = set(), set(), set(), set()
        self.complete = True
        for path in paths.split(","):
            self.add(path, open(path, encoding="utf-8", errors="replace").read())
        # Stopped in one log but failing in another (a rerun, say): a failure.
        self.interrupted -= self.failed

    def add(self, path, text):
        if not ANY_RESULT.search(text):
            raise Unusable(f"{path}: no test result in it (an empty or aborted run?)")
        failed, interrupted = set(), set()
        for m in SUB.finditer(text):
            sub = (m.group(2), re.sub(r"[\s']", "", m.group(1)))
            rest = text[m.end():text.find("\n", m.end())]
            (interrupted if STOPPED in rest else failed).add(sub)
        for m in WHOLE.finditer(text):
            if (m.group(2) or "").startswith("Failed: Timeout"):
                self.timed_out.add(m.group(1))
            else:
                failed.add((m.group(1), "(whole test)"))
        # Within one log the short summary restates a stopped subtest as failed.
        self.failed |= failed - interrupted
        self.interrupted |= interrupted
        self.ran |= set(RAN.findall(text))
        self.complete = self.complete and bool(SUMMARY.search(text))


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        return compare(argv)
    except (OSError, Unusable) as e:
        print(f"failures.py: {e}", file=sys.stderr)
        return 2


def by_test(subtests):
    return dict(sorted(Counter(t for t, _ in subtests).items()))


def compare(argv):
    control = Log(argv[1])
    report = {"schema": 2, "control": {"log": argv[1], "complete": control.complete,
                                       "timed_out": sorted(control.timed_out),
                                       "failed": len(control.failed),
                                       "by_test": by_test(control.failed)}}
    own = 0
    for paths in argv[2:]:
        log = Log(paths)
        extra = sorted(log.failed - control.failed)
        own += len(extra)
        report[paths] = {"complete": log.complete, "timed_out": sorted(log.timed_out),
                         "failed": len(log.failed), "by_test": by_test(log.failed),
                         "interrupted": [f"{t} {s}" for t, s in sorted(log.interrupted)],
                         "also_failed_by_control": len(log.failed & control.failed),
                         "not_failed_by_control": [f"{t} {s}" for t, s in extra],
                         "not_run_by_control": sorted({t for t, _ in extra} - control.ran)}
    print(json.dumps(report, indent=1))
    return 1 if own else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
