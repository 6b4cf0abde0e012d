"""One session's Stop never ends another session's exact scan (issue 29). Scans are shared by key across the
process (runtime.JOBS, drawn by pages/_ui/deletion.py): every session asking for the same scan follows the one
job; Stop ends this session's following, and the scan only when nobody else follows it; a session that stopped
may follow again while it runs; a scan started while a cancelled one winds down waits for it."""
from __future__ import annotations

import time
import uuid

import pytest
from streamlit.testing.v1 import AppTest

from longviz_core.runtime import SharedJobs
from support.scans import SCANS, GatedScan

loss = pytest.mark.guards("loss")
wrong = pytest.mark.guards("wrong")
DONE = {"counts": 5, "stopped": False}


def _until(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


# ------------------------------------------------------------------------------------------------ the job
@loss
def test_a_stop_detaches_one_watcher_and_the_last_one_cancels():
    jobs, scan = SharedJobs(), GatedScan()
    job = jobs.follow("k", scan, "a")
    assert jobs.follow("k", scan, "b") is job  # b follows the same job: one scan, not two
    _until(lambda: scan.started == 1)
    assert job.detach("a") == 1
    assert not job.cancelled and job.running and not job.watched_by("a") and job.watched_by("b")
    scan.go.set()
    assert job.join(10) and job.result == DONE and job.error is None  # b's scan ran to the end
    assert scan.started == 1

    jobs, scan = SharedJobs(), GatedScan()
    job = jobs.follow("k", scan, "a")
    jobs.follow("k", scan, "b")
    job.detach("a")
    assert not job.cancelled
    job.detach("b")  # the last watcher stops: the scan is cancelled, its counts kept
    assert job.cancelled and job.join(10) and job.result["stopped"]


@loss
def test_a_watcher_that_stopped_follows_again_and_keeps_the_scan_alive():
    jobs, scan = SharedJobs(), GatedScan()
    job = jobs.follow("k", scan, "a")
    jobs.follow("k", scan, "b")
    job.detach("a")
    assert jobs.follow("k", scan, "a") is job and job.watched_by("a")  # re-attached, not a second scan
    job.detach("b")
    assert not job.cancelled  # a follows again: b's Stop does not end it
    scan.go.set()
    assert job.join(10) and job.result == DONE and scan.started == 1


@wrong
def test_a_scan_asked_for_while_a_cancelled_one_winds_down_waits_for_it():
    jobs, scan = SharedJobs(), GatedScan()
    scan.linger.clear()
    first = jobs.follow("k", scan, "a")
    _until(lambda: scan.started == 1)
    first.detach("a")
    assert first.cancelled and first.running  # winding down
    assert not first.attach("b")  # a cancelled job is not followed again: a new one is started
    second = jobs.follow("k", scan, "b")
    assert second is not first and jobs.get("k") is second
    time.sleep(0.2)
    assert scan.started == 1  # the new scan has not begun beside the old one
    scan.linger.set()
    scan.go.set()
    assert first.join(10) and second.join(10)
    assert first.result["stopped"] and second.result == DONE
    assert scan.started == 2 and scan.most_at_once == 1


# ------------------------------------------------------------------------------------------------ the page
_SCAN_APP = """
import streamlit as st
from pages._ui import deletion
from support.scans import SCANS
key = {key!r}
result = deletion.exact_stage("scan", key, SCANS[key], 100, 0.01)
st.write(f"result={{result}}")
"""


def _session(key: str) -> AppTest:
    at = AppTest.from_string(_SCAN_APP.format(key=key), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def _click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def _result(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("result="))


def _following(at: AppTest) -> bool:
    return any(b.key == "scan.exact_stop" for b in at.button)


@loss
def test_two_sessions_one_scan_one_stops_the_other_finishes_the_last_stop_cancels():
    from longviz_core.runtime import JOBS

    key = f"scan-{uuid.uuid4().hex}"
    scan = SCANS[key] = GatedScan()
    a, b = _session(key), _session(key)
    _click(a, "scan.exact")
    assert _following(a)
    b.run()  # b sees the running scan and follows it rather than starting another
    assert not _following(b) and b.button(key="scan.exact").label == "Follow the running exact scan"
    _click(b, "scan.exact")
    assert _following(b)
    job = JOBS.get(key)
    _click(a, "scan.exact_stop")  # a stops: b still follows, so the scan goes on
    assert not _following(a) and not job.cancelled and job.running
    assert any("running for another session" in i.value for i in a.info)
    b.run()
    assert _following(b)
    scan.go.set()
    assert job.join(10)
    b.run()
    b.run()  # the fragment reruns the page once the scan is over
    assert _result(b) == f"result={DONE}" and scan.started == 1
    a.run()
    assert _result(a) == f"result={DONE}"  # the session that stopped gets the finished numbers too

    key = f"scan-{uuid.uuid4().hex}"
    scan = SCANS[key] = GatedScan()
    a, b = _session(key), _session(key)
    _click(a, "scan.exact")
    _click(b, "scan.exact")
    job = JOBS.get(key)
    _click(a, "scan.exact_stop")
    assert not job.cancelled
    _click(b, "scan.exact_stop")  # the last follower stops: the scan is cancelled, the counts kept
    assert job.cancelled and job.join(10) and job.result["stopped"]
    a.run()
    assert any(i.value.startswith("Stopped: every count scored so far is kept.") for i in a.info)
    assert _result(a) == f"result={job.result}" and a.button(key="scan.exact").label.startswith("Scan to the end")


_FLIPS_APP = """
import streamlit as st
from pages._ui import deletion, shell
from support.scans import SCANS
key = {key!r}
with shell.guard():
    result = deletion.flips_stage("scan", key, SCANS[key])
st.write(f"result={{result}}")
"""


class _Failing:
    def __call__(self, progress, stop):
        from longviz_core.evaluation.deletion import DeletionError

        raise DeletionError("the scan store is full")


@wrong
def test_first_flips_start_by_themselves_once_for_every_session_and_show_when_over():
    from longviz_core.runtime import JOBS
    from pages._ui.deletion import FLIPS
    from pages._ui.keys import K

    watcher = K.page("deletion", "watcher")
    key = f"flips-{uuid.uuid4().hex}"
    scan = SCANS[key] = GatedScan()
    a = AppTest.from_string(_FLIPS_APP.format(key=key), default_timeout=60).run()
    assert not a.exception and _result(a) == "result=None"  # the page goes on without them: no wait, no button
    _until(lambda: scan.started == 1)
    assert not a.button and a.get("progress")  # a bar (the fragment), and no Stop: the scan is bounded
    b = AppTest.from_string(_FLIPS_APP.format(key=key), default_timeout=60).run()
    assert _result(b) == "result=None"
    job = JOBS.get(FLIPS + key)
    assert job.watched_by(a.session_state[watcher]) and job.watched_by(b.session_state[watcher])
    assert job in JOBS.running(FLIPS) and scan.started == 1  # b follows a's scan
    scan.go.set()
    assert job.join(10) and job not in JOBS.running(FLIPS)
    assert _result(a.run()) == f"result={DONE}" and _result(b.run()) == f"result={DONE}" and scan.started == 1

    key = f"flips-{uuid.uuid4().hex}"
    SCANS[key] = _Failing()
    a = AppTest.from_string(_FLIPS_APP.format(key=key), default_timeout=60).run()
    assert JOBS.get(FLIPS + key).join(10)
    a.run()  # the scan's error, as the page's guard shows every LongvizError: no traceback
    assert not a.exception and [e.value for e in a.error] == ["the scan store is full"]
