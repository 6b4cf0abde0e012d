"""Many users at once: 1, 4 and 8 concurrent sessions against a real `streamlit run app.py` on 127.0.0.1.

    python benchmarks/load.py [--levels 1,4,8] [--max-tokens 512] [--steps 4] [--deadline 1500]

Each session is one browser tab reduced to Streamlit's WebSocket protocol (tests/support/servers.py): it opens
the app, picks its own demo document (a different one per session), waits for the rendered document page, then
asks for Integrated Gradients on the attribution page. Sessions of a level start together (a barrier).

Checked, per level: no exception or error alert in any session; each session's page names its own document
and the tokens it shows are its document's (no cross-talk); the model is loaded once for the whole server
(load_model calls counted by a wrapper); compute is serialised through the queue (sessions see their place in
it); and, after the levels, a session that disconnects in the middle of Integrated Gradients releases the queue
(the next session's run completes). Reported: p50 / p95 seconds to a rendered document page and to finished
Integrated Gradients, and the server's peak resident memory (VmHWM). Everything is bounded: every wait has a
timeout and the whole run a deadline; the server is stopped at the end.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from longviz_core import load_dataset, load_model  # noqa: E402
from longviz_core.demo import ensure_demo  # noqa: E402
from support.servers import Session, serve_counting  # noqa: E402


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _session(port: int, doc: int, steps: int, max_tokens: int, barrier: threading.Barrier, out: dict,
             expect_text: str | None, timeout: float) -> None:
    s = Session(port)
    try:
        s.run(timeout=timeout)
        s.set("doc_index", int_value=doc)
        s.set("max_tokens", int_value=max_tokens)
        barrier.wait()
        t0 = time.perf_counter()
        s.run(timeout=timeout)
        out["page_s"] = time.perf_counter() - t0
        out["problems"] = s.problems()
        text = " ".join(c.body for c in s.of_type("markdown"))
        out["own_document"] = f"document {doc} (by index)" in text
        shown = [t.default for t in s.of_type("text_area")]
        out["own_tokens"] = expect_text is None or shown == [expect_text]  # its document's text, nobody else's
        s.run(page="attribution", timeout=timeout)
        s.set("attribution.steps", string_value="custom")
        s.run(timeout=timeout)
        s.set("attribution.steps_n", int_value=steps)
        s.run(timeout=timeout)
        t0 = time.perf_counter()
        s.run(trigger="attribution.run", timeout=timeout)
        out["ig_s"] = time.perf_counter() - t0
        out["problems"] += s.problems()
        out["queued"] = any("Waiting for the model" in a for a in s.seen_alerts)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        out["crash"] = f"{type(exc).__name__}: {exc}"
    finally:
        s.close()


def _disconnect_mid_ig(port: int, doc: int, max_tokens: int, timeout: float) -> float:
    """A session starts a long IG run and closes its socket; returns how long the next session's short IG run
    takes (it must finish: the abandoned run released the queue)."""
    s = Session(port)
    s.run(timeout=timeout)
    s.set("doc_index", int_value=doc)
    s.set("max_tokens", int_value=max_tokens)
    s.run(timeout=timeout)
    s.run(page="attribution", timeout=timeout)
    s.set("attribution.steps", string_value="custom")
    s.run(timeout=timeout)
    s.set("attribution.steps_n", int_value=400)
    s.run(timeout=timeout)
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    msg = BackMsg()
    msg.rerun_script.page_script_hash = s.page_hash
    msg.rerun_script.widget_states.widgets.extend(s.states.values())
    msg.rerun_script.widget_states.widgets.append(WidgetState(id=s.id_of("attribution.run"), trigger_value=True))
    s.ws.send(msg.SerializeToString())
    time.sleep(2.0)  # the run has started
    s.close()
    out: dict = {}
    _session(port, doc + 1, 2, max_tokens, threading.Barrier(1), out, None, timeout)
    if "crash" in out or out["problems"]:
        raise RuntimeError(f"the session after a disconnect failed: {out}")
    return out["ig_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=600, help="seconds one page may take")
    ap.add_argument("--deadline", type=float, default=1800, help="seconds for the whole run")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    started = time.monotonic()
    demo = ensure_demo()
    texts = load_dataset("demo", id2label=load_model("demo").id2label)["text"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        proc, port, _, loads, _ = serve_counting(tmp, demo.root)  # a fresh cache: the sessions really compute
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average "
              f"{os.getloadavg()[0]:.1f} at start; {a.max_tokens} tokens, {a.steps} IG steps")
        rows, doc, failures = [], 0, []
        try:
            for n in levels:
                if time.monotonic() - started > a.deadline:
                    failures.append(f"deadline reached before level {n}")
                    break
                results = [dict() for _ in range(n)]
                barrier = threading.Barrier(n, timeout=a.timeout)
                docs = list(range(doc, doc + n))
                doc += n
                threads = [threading.Thread(target=_session, args=(port, d, a.steps, a.max_tokens, barrier, r,
                                                                   texts.iloc[d], a.timeout))
                           for d, r in zip(docs, results)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(a.deadline)
                crashes = [r["crash"] for r in results if "crash" in r]
                problems = [p for r in results for p in r.get("problems", [])]
                talk = sum(not (r.get("own_document") and r.get("own_tokens")) for r in results if "crash" not in r)
                failures += crashes + problems + ([f"{talk} sessions saw another document"] if talk else [])
                page = [r["page_s"] for r in results if "page_s" in r]
                ig = [r["ig_s"] for r in results if "ig_s" in r]
                rows.append((n, np.percentile(page, 50), np.percentile(page, 95), np.percentile(ig, 50),
                             np.percentile(ig, 95), sum(r.get("queued", False) for r in results), talk,
                             _peak_rss_mib(proc.pid)))
            after = _disconnect_mid_ig(port, doc, a.max_tokens, a.timeout)
            model_loads = loads.read_text().split() if loads.exists() else []
        finally:
            proc.terminate()
            proc.wait(30)
        log = (tmp / "server.log").read_text()
    print(f"load average {os.getloadavg()[0]:.1f} at end; {time.monotonic() - started:.0f} s in all")
    print("| sessions | page p50 (s) | page p95 (s) | IG p50 (s) | IG p95 (s) | queued | cross-talk | peak RSS (MiB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, p50, p95, i50, i95, queued, talk, rss in rows:
        print(f"| {n} | {p50:.1f} | {p95:.1f} | {i50:.1f} | {i95:.1f} | {queued}/{n} | {talk} | {rss:.0f} |")
    print(f"model loads: {len(model_loads)} ({', '.join(model_loads)}); after a session left mid-IG (400 steps) "
          f"the next session's IG finished in {after:.1f} s; tracebacks in the server log: {log.count('Traceback')}")
    if len(model_loads) != 1:
        failures.append(f"the model was loaded {len(model_loads)} times")
    if "Traceback" in log:
        failures.append("a traceback in the server log")
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
