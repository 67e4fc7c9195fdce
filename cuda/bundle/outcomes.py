"""A pytest plugin that writes every test's outcome as it happens, one JSON object a line.

    OUTCOMES_FILE=out.jsonl python3 -m pytest -p outcomes test_x.py

Lines: {"collected": [ids]} once; {"start": id} when a test begins; {"id", "when", "outcome",
"reason"?, "subtest"?} for each report (setup, call, teardown; a subtest's report carries its
"subtest" message). Each line is flushed when written, so a process that crashes or is killed
leaves the test it was running as a "start" with no "call" (suite_json.py reads that as crashed,
or timeout when the file ran out of time). pytest-timeout's failures say so ("timeout": true).
Without OUTCOMES_FILE the plugin does nothing.
"""
import json
import os
import re

# pytest-timeout's failure: "Failed: Timeout (>300.0s) from pytest-timeout."
TIMEOUT = re.compile(r"Timeout \(>[0-9.]+s\) from pytest-timeout")

_out = None


def _write(obj):
    if _out is not None:
        _out.write(json.dumps(obj) + "\n")
        _out.flush()


def pytest_configure(config):
    global _out
    path = os.environ.get("OUTCOMES_FILE")
    if path:
        _out = open(path, "a", encoding="utf-8")


def pytest_collection_finish(session):
    _write({"collected": [item.nodeid for item in session.items]})


def pytest_runtest_logstart(nodeid, location):
    _write({"start": nodeid})


def _reason(report):
    lr = report.longrepr
    if lr is None:
        return None
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2])[:300]
    text = str(lr)
    last = [line for line in text.splitlines() if line.strip()]
    return (last[-1] if last else text)[:300]


def pytest_runtest_logreport(report):
    rec = {"id": report.nodeid, "when": report.when, "outcome": report.outcome}
    ctx = getattr(report, "context", None)
    if ctx is not None:
        msg = getattr(ctx, "msg", None)
        kwargs = getattr(ctx, "kwargs", None)
        rec["subtest"] = str(msg if msg is not None else kwargs)[:200]
    if report.outcome != "passed":
        reason = _reason(report)
        if reason:
            rec["reason"] = reason
        if TIMEOUT.search(str(report.longrepr)[-2000:]):
            rec["timeout"] = True
    _write(rec)


def pytest_unconfigure(config):
    global _out
    if _out is not None:
        _out.close()
        _out = None
