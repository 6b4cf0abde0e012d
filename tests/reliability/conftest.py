"""The reliability matrix (issues 16, 23 and 29): bad inputs, links, files and arguments, bad checkpoints, damaged
files of every kind the cache and the store write, injection through overlays and exports, hosted-mode escapes,
folders that are not stores, and faults (full disk, SIGKILL, server restart).

Every case is marked with what its failure would be, `@pytest.mark.guards(kind)`:

  traceback   the case must end in a typed LongvizError with an actionable message (or a page's st.error)
  wrong       the case must give the right result: damage detected and recomputed, a resumed store identical
  injection   user text must come out inert (escaped HTML, spreadsheet formulas neutralised)
  allowlist   a hosted server must not let a link or a widget reach what its configuration does not offer
  loss        nothing that was there before is lost: rows of a dataset, files of a folder that is not a store
  misleading  the message names the real fault and a fix that works (not "damaged" for a refused format)

At the end of the run the counts are printed: cases run, and the failures of each kind (all 0 when it holds).
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GUARDS = {"traceback": "tracebacks", "wrong": "silent wrong results", "injection": "injections",
          "allowlist": "allowlist escapes", "loss": "losses",
          "misleading": "misleading messages"}
_outcomes: dict[str, tuple[str, str]] = {}  # nodeid -> (guard kind, "passed" | "failed" | "skipped")


def pytest_configure(config):
    config.addinivalue_line("markers", "guards(kind): what a failure of a reliability case would be: "
                                       + ", ".join(GUARDS))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        mark = item.get_closest_marker("guards")
        if mark is None or mark.args[0] not in GUARDS:
            raise pytest.UsageError(f"{item.nodeid} needs @pytest.mark.guards(kind), kind one of {list(GUARDS)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    mark = item.get_closest_marker("guards")
    if mark is None:
        return
    if report.failed:
        _outcomes[item.nodeid] = (mark.args[0], "failed")
    elif report.skipped:
        _outcomes.setdefault(item.nodeid, (mark.args[0], "skipped"))
    elif report.when == "call":
        _outcomes.setdefault(item.nodeid, (mark.args[0], "passed"))


def pytest_terminal_summary(terminalreporter):
    if not _outcomes:
        return
    ran = [o for o in _outcomes.values() if o[1] != "skipped"]
    failed = {kind: sum(1 for k, o in ran if k == kind and o == "failed") for kind in GUARDS}
    skipped = len(_outcomes) - len(ran)
    terminalreporter.write_sep("=", "reliability matrix")
    terminalreporter.write_line(
        f"cases run {len(ran)}" + (f" (skipped {skipped})" if skipped else "") + ", "
        + ", ".join(f"{GUARDS[k]} {failed[k]}" for k in GUARDS))
