"""Load test: the real app served by `streamlit run` on loopback, 8 concurrent sessions speaking Streamlit's own
WebSocket protocol, each analysing a demo document and running Integrated Gradients.

Checks: no exception or error in any session, each session sees its own document (no shared state), the model
is loaded once for all of them, and every number equals a single-session run of the core. The server runs
app.py through a wrapper that counts `load_model` calls into a file (the only instrumentation)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.sync.client import connect

import longviz_core as lv
from longviz_core import attribution as ig

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = 8
DOCS = 4  # sessions i and i + 4 share a document: they also race for the same cache entries
MAX_TOKENS = 512
STEPS = 4
WRAPPER = """
import os, runpy, sys
sys.path.insert(0, {root!r})
from longviz_core import cache
if not getattr(cache, "_load_counter", False):  # once per process: Streamlit re-runs this file per rerun
    real = cache.load_model

    def counted(source, *args, **kwargs):
        with open(os.environ["LONGVIZ_TEST_LOAD_LOG"], "a") as fh:
            fh.write(source + "\\n")
        return real(source, *args, **kwargs)

    cache.load_model, cache._load_counter = counted, True
runpy.run_path({app!r}, run_name="__main__")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(script: Path, env: dict, log: Path, args=()) -> tuple[subprocess.Popen, int]:
    """`streamlit run script` on 127.0.0.1 (headless), returned once it accepts connections."""
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
           *(["--", *args] if args else [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"streamlit did not start:\n{log.read_text()[-3000:]}")


class Session:
    """One browser tab, reduced to the protocol: send widget states, collect the elements drawn."""

    def __init__(self, port: int):
        self.port = port
        self._stack = ExitStack()
        self.ws = self._stack.enter_context(connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                                    max_size=None, open_timeout=60))
        self.states: dict[str, WidgetState] = {}  # widget id -> state, resent on every rerun like the browser
        self.pages: dict[str, str] = {}  # url path -> page script hash
        self.page_hash = ""
        self.seen_alerts: list[str] = []  # every alert drawn during the runs, also those replaced later

    def close(self) -> None:
        self._stack.close()

    def run(self, page: str | None = None, trigger: str | None = None, timeout: float = 240) -> dict:
        if page is not None:
            self.page_hash = self.pages[page]
        msg = BackMsg()
        msg.rerun_script.page_script_hash = self.page_hash
        # what a browser sends with every rerun; without it the server ignores the widget states
        ctx = msg.rerun_script.context_info
        ctx.timezone, ctx.locale, ctx.url = "UTC", "en-US", f"http://127.0.0.1:{self.port}/"
        for state in self.states.values():
            msg.rerun_script.widget_states.widgets.append(state)
        if trigger is not None:
            msg.rerun_script.widget_states.widgets.append(WidgetState(id=self.id_of(trigger), trigger_value=True))
        self.ws.send(msg.SerializeToString())
        self.elements = {}
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(self.ws.recv(timeout=timeout))
            kind = fwd.WhichOneof("type")
            if kind == "navigation":
                self.pages = {p.url_pathname: p.page_script_hash for p in fwd.navigation.app_pages}
                self.page_hash = fwd.navigation.page_script_hash
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                self.elements[tuple(fwd.metadata.delta_path)] = el
                if el.WhichOneof("type") == "alert":
                    self.seen_alerts.append(el.alert.body)
            elif kind == "script_finished" and fwd.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                return self.elements

    def of_type(self, kind: str) -> list:
        return [getattr(e, kind) for _, e in sorted(self.elements.items()) if e.WhichOneof("type") == kind]

    def id_of(self, key: str) -> str:
        for e in self.elements.values():
            widget = getattr(e, e.WhichOneof("type"))
            if getattr(widget, "id", "").endswith(f"-{key}"):
                return widget.id
        raise KeyError(f"no widget with key {key!r} on the page")

    def set(self, key: str, **value) -> None:
        wid = self.id_of(key)
        self.states[wid] = WidgetState(id=wid, **value)

    def metric(self, label: str):
        return next(m for m in self.of_type("metric") if m.label == label)

    def problems(self) -> list[str]:
        """Exceptions and error alerts on the page (format 1 = ERROR)."""
        return ([f"exception: {e.type}: {e.message}" for e in self.of_type("exception")]
                + [f"error: {a.body}" for a in self.of_type("alert") if a.format == 1])


@pytest.fixture(scope="module")
def server(demo, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    cache_dir = tmp / "cache"  # fresh attribution cache: the sessions really compute
    cache_dir.mkdir()
    (cache_dir / demo.root.name).symlink_to(demo.root)
    wrapper = tmp / "app_counted.py"
    wrapper.write_text(WRAPPER.format(root=str(ROOT), app=str(ROOT / "app.py")))
    loads = tmp / "loads.txt"
    env = dict(os.environ, LONGVIZ_CACHE_DIR=str(cache_dir), LONGVIZ_TEST_LOAD_LOG=str(loads))
    env.pop("LONGVIZ_CONFIG", None)
    log = tmp / "server.log"
    proc, port = serve(wrapper, env, log)
    yield port, cache_dir, loads, log
    proc.terminate()
    proc.wait(30)


def _session(port: int, doc: int, barrier: threading.Barrier, out: dict, i: int) -> None:
    s = Session(port)
    try:
        s.run()
        s.set("doc_index", int_value=doc)
        s.set("max_tokens", int_value=MAX_TOKENS)
        s.run()
        out["doc_problems"] = s.problems()
        out["caption"] = " ".join(c.body for c in s.of_type("markdown"))
        predicted = s.metric("Predicted")
        out["predicted"], out["p"] = predicted.body, predicted.delta
        s.run(page="attribution")
        s.set("attribution.steps", string_value="custom")
        s.run()
        s.set("attribution.steps_n", int_value=STEPS)
        s.run()
        barrier.wait()  # every session asks for Integrated Gradients at the same moment
        s.run(trigger="attribution.run")
        out["ig_problems"] = s.problems()
        out["score"] = s.metric("Attribution score").body
        out["queued"] = any("Waiting for the model" in a for a in s.seen_alerts)
        out["stale_notice"] = any("Waiting for the model" in a.body for a in s.of_type("alert"))
    except Exception as exc:  # noqa: BLE001 - reported by the test
        out["crash"] = f"session {i}: {type(exc).__name__}: {exc}"
    finally:
        s.close()


def test_eight_concurrent_sessions(server, demo_dataset, monkeypatch):
    port, cache_dir, loads, log = server
    results = [dict() for _ in range(SESSIONS)]
    barrier = threading.Barrier(SESSIONS, timeout=600)
    threads = [threading.Thread(target=_session, args=(port, i % DOCS, barrier, results[i], i))
               for i in range(SESSIONS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    server_log = log.read_text()
    assert not [r["crash"] for r in results if "crash" in r], server_log[-3000:]
    for i, r in enumerate(results):
        assert r["doc_problems"] == [] and r["ig_problems"] == [], (i, r)
        assert f"document {i % DOCS} (by index)" in r["caption"]  # its own choice, not another session's
    assert "Traceback" not in server_log
    assert loads.read_text().split() == ["demo"]  # one model copy for all sessions

    # every number equals a single-session run of the core, on the model the server loaded (same files, same
    # path: the fingerprint covers the checkpoint's config, which names its directory)
    monkeypatch.setenv("LONGVIZ_CACHE_DIR", str(cache_dir))
    model = lv.load_model("demo")
    assert f"fingerprint {model.fingerprint}" in results[0]["caption"]
    for doc in range(DOCS):
        analysis = lv.analyze(model, demo_dataset["text"].iloc[doc], MAX_TOKENS)
        single = ig.integrated_gradients(model, analysis, n_steps=STEPS, use_cache=False)
        shared = ig.cached_attribution(model, analysis, n_steps=STEPS, cache_dir=cache_dir)
        assert shared is not None  # written by the sessions
        np.testing.assert_allclose(shared.scores, single.scores, rtol=1e-5, atol=1e-8)
        for r in results[doc::DOCS]:
            assert r["predicted"] == analysis.label_name(analysis.predicted)
            assert r["p"] == f"p = {analysis.probs[analysis.predicted]:.3f}"
            assert r["score"] == f"{single.total:+.3f}"
    queued = sum(r["queued"] for r in results)
    stale = sum(r["stale_notice"] for r in results)
    print(f"\n{SESSIONS} sessions: {seconds:.1f} s wall, {queued} saw their place in the compute queue, "
          f"{stale} still show the notice after their job ran")
    assert queued >= 1  # eight simultaneous IG requests on one model: the queue shows
    assert stale == 0  # the notice clears when the job starts
