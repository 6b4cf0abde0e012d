"""`streamlit run` on loopback for the browser, link and load tests, and a Session speaking Streamlit's
WebSocket protocol."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[2]


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


def leave_first_request(port: int) -> None:
    """One run of app.py through the protocol (the document page at 16 tokens), so that the server is past its
    first request before a test's browser makes one. On a fresh server a link straight to a page first runs that
    page file alone, which reruns through app.py (pages/_ui/shell.run_through_app); between the two runs the
    page reads "not running" for a moment, which a browser's wait (support.browser.wait_idle) can take for the
    end. Only tests/app/test_links.py's first-request test is about that moment, on a server of its own."""
    session = Session(port, query="max_tokens=16")
    try:
        session.run()
    finally:
        session.close()


class Session:
    """One browser tab, reduced to the protocol: send widget states, collect the elements drawn."""

    def __init__(self, port: int, query: str = ""):
        self.port, self.query = port, query  # the URL's query string every run sends, e.g. "max_tokens=16"
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
        msg.rerun_script.query_string = self.query
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



_COUNTING_APP = """
import os, runpy, sys
sys.path.insert(0, {root!r})
from longviz_core import cache
if not getattr(cache, "_load_counter", False):  # once per process: Streamlit re-runs this file per rerun
    real = cache.load_model

    def counted(source, *args, **kwargs):
        with open(os.environ["LONGVIZ_LOAD_LOG"], "a") as fh:
            fh.write(source + "\\n")
        return real(source, *args, **kwargs)

    cache.load_model, cache._load_counter = counted, True
runpy.run_path({app!r}, run_name="__main__")
"""


def serve_counting(tmp: Path, demo_root: Path):
    """`streamlit run app.py` on a fresh cache under `tmp` that holds only the demo (so every session really
    computes), every model load appended to tmp/loads.txt (one line each: one model copy serves all sessions),
    its output in tmp/server.log. Returns (process, port, cache folder, loads file, server log)."""
    cache_dir = tmp / "cache"
    cache_dir.mkdir()
    (cache_dir / demo_root.name).symlink_to(demo_root)
    wrapper = tmp / "app_counted.py"
    wrapper.write_text(_COUNTING_APP.format(root=str(ROOT), app=str(ROOT / "app.py")))
    loads, log = tmp / "loads.txt", tmp / "server.log"
    env = dict(os.environ, LONGVIZ_CACHE_DIR=str(cache_dir), LONGVIZ_LOAD_LOG=str(loads))
    env.pop("LONGVIZ_CONFIG", None)
    proc, port = serve(wrapper, env, log)
    return proc, port, cache_dir, loads, log
