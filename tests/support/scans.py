"""A scan the tests drive: `work(progress, stop)` for runtime.JOBS (the pages' exact scan) that scores one count at a
time only while the test lets it, ends early (with the counts scored so far) once its job is cancelled, and
counts how many runs began and how many ran at once."""
from __future__ import annotations

import threading


class GatedScan:
    def __init__(self, counts: int = 5) -> None:
        self.counts = counts
        self.go = threading.Event()  # set: the remaining counts are scored
        self.linger = threading.Event()  # cleared: a cancelled run waits for it before it returns (winding down)
        self.linger.set()
        self.started = 0
        self.most_at_once = 0
        self._running = 0
        self._lock = threading.Lock()

    def __call__(self, progress, stop) -> dict:
        with self._lock:
            self.started += 1
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        try:
            for scored in range(self.counts):
                progress(scored / self.counts, f"{scored} of {self.counts} counts")
                while not stop.is_set() and not self.go.wait(0.01):
                    pass
                if stop.is_set():
                    self.linger.wait()
                    return {"counts": scored, "stopped": True}
            return {"counts": self.counts, "stopped": False}
        finally:
            with self._lock:
                self._running -= 1


SCANS: dict[str, GatedScan] = {}  # by key: the scan an AppTest script runs (the script and the test share the process)
