"""Prints what the fuzzer measured (tests/security/test_fuzz.py) at the end of a run."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    fuzz = sys.modules.get("tests.security.test_fuzz")
    costs = getattr(fuzz, "COSTS", None)
    if costs is None or not costs.cases:
        return
    terminalreporter.section("fuzz costs")
    for line in costs.summary():
        terminalreporter.write_line(line)
    path = os.environ.get("MMCODEC_FUZZ_COST_FILE")
    if path:
        with open(path, "w") as out:
            json.dump(costs.as_json(), out, indent=2)
