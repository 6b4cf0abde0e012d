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

from support.guards import GUARDS

HERE = Path(__file__).resolve().parent


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
    """Each report carries its case's kind, which the run's summary (tests/conftest.py) counts: a report is what
    pytest-xdist's workers send to the process that prints the summary."""
    outcome = yield
    mark = item.get_closest_marker("guards")
    if mark is not None:
        outcome.get_result().user_properties.append(("guards", mark.args[0]))
