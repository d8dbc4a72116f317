"""A pytest plugin (loaded with `-p _jgem_pytest_report`, this directory on PYTHONPATH; no jgem import, so it runs
in any interpreter with pytest): every test's node id, outcome and first failure line, written as JSON to the file
$JGEM_PYTEST_REPORT when the session ends."""

import json
import os
import re

_RESULTS: dict = {}


def pytest_runtest_logreport(report):
    prev = _RESULTS.get(report.nodeid)
    if prev is not None and prev[0] != "passed":
        return  # the first failure (or skip) of a test stays
    if report.when != "call" and report.passed:
        return  # setup or teardown passed: the call decides
    message = ""
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]
        message = re.sub(r"0x[0-9a-fA-F]+", "0x...", message)[:1000]  # no addresses: the same run, the same text
    _RESULTS[report.nodeid] = [report.outcome, message]


def pytest_sessionfinish(session):
    path = os.environ.get("JGEM_PYTEST_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_RESULTS, f, sort_keys=True)
