"""Process-wide coordination of heavy model work.

One model copy serves every Streamlit session of a process, and a GPU (or two CPU cores) cannot run two
4,096-token jobs at once without running out of memory or thrashing. Heavy work therefore runs one job at a
time under `COMPUTE`, a FIFO queue that can tell a waiting job its place in line: whoever starts the work (a page,
the command line, a worker thread) sets the notice once with `waiting_notice`, and every `COMPUTE.hold` below it,
however deep, reads it from the context instead of an argument passed through each layer. Work that outlives the
page run asking for it (the exact flip scan) runs as a `SharedJob` in `JOBS`: one job per key, followed by every
session that asks for it, and cancelled only when the last of them stops following.
"""
from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator


# Told k while k jobs are ahead of this one in COMPUTE's line, and 0 once a job that had to wait starts.
_WAIT_NOTICE: ContextVar[Callable[[int], None] | None] = ContextVar("longviz_wait_notice", default=None)


@contextmanager
def waiting_notice(on_wait: Callable[[int], None] | None) -> Iterator[None]:
    """Heavy work started inside the block tells `on_wait(k)` its place in the compute queue (None: silence).
    Threads do not inherit it: a worker sets its own or runs in contextvars.copy_context()."""
    token = _WAIT_NOTICE.set(on_wait)
    try:
        yield
    finally:
        _WAIT_NOTICE.reset(token)


class ComputeQueue:
    """A fair (first come, first served) re-entrant lock with a visible queue."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._line: list[int] = []  # ticket numbers waiting or running, in order
        self._next = 0
        self._owner: int | None = None  # thread id holding the lock
        self._depth = 0

    def waiting(self) -> int:
        with self._cond:
            return max(0, len(self._line) - 1)

    @contextmanager
    def hold(self, poll_s: float = 0.5) -> Iterator[None]:
        """Run the body alone. The context's waiting notice (see waiting_notice) is told k while k jobs are
        ahead of this one, and 0 once when a job that had to wait starts."""
        on_wait = _WAIT_NOTICE.get()
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:  # nested call from the same job
                self._depth += 1
                reentered = True
            else:
                reentered = False
                ticket = self._next
                self._next += 1
                self._line.append(ticket)
                waited = False
                while self._line[0] != ticket:
                    waited = True
                    if on_wait is not None:
                        on_wait(self._line.index(ticket))
                    self._cond.wait(timeout=poll_s)
                self._owner, self._depth = me, 1
                if waited and on_wait is not None:
                    on_wait(0)  # our turn: lets a "waiting" notice clear itself
        try:
            yield
        finally:
            with self._cond:
                self._depth -= 1
                if not reentered and self._depth == 0:
                    self._owner = None
                    self._line.pop(0)
                    self._cond.notify_all()


COMPUTE = ComputeQueue()


class SharedJob:
    """One background job that several watchers (sessions, by any hashable id) follow: `work(progress, stop)` runs
    in a daemon thread, its progress, then its result or error, readable by all. A watcher that stops following
    (`detach`) ends the job only when no other watcher follows it: one watcher's Stop never ends another's job. A
    watcher that detached may `attach` again while the job runs and is not cancelled."""

    def __init__(self, watcher) -> None:
        self.stop = threading.Event()  # set once nobody follows: the work ends at its next progress report
        self.fraction, self.message = 0.0, "Starting"
        self.result: object = None
        self.error: Exception | None = None
        self._watchers = {watcher}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    @property
    def cancelled(self) -> bool:
        return self.stop.is_set()

    def watched_by(self, watcher) -> bool:
        with self._lock:
            return watcher in self._watchers

    def attach(self, watcher) -> bool:
        """Follow the job; False when it is cancelled or over (then a new job must be started)."""
        with self._lock:
            if self.cancelled or not self.running:
                return False
            self._watchers.add(watcher)
            return True

    def detach(self, watcher) -> int:
        """Stop following; the last watcher's detach cancels the job. Returns how many watchers still follow it."""
        with self._lock:
            self._watchers.discard(watcher)
            if not self._watchers:
                self.stop.set()
            return len(self._watchers)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the job is over (or `timeout` seconds); whether it is."""
        return self._done.wait(timeout)

    def _start(self, work, after: SharedJob | None, name: str) -> None:
        """Run `work` in a daemon thread carrying the caller's context, after `after` (a cancelled job of the same
        key winding down) is over, with its own queue notice (the caller's may not be called off its thread)."""
        def progress(fraction: float, message: str) -> None:
            self.fraction, self.message = fraction, message

        def on_wait(ahead: int) -> None:
            if ahead:
                self.message = f"Waiting for the model: {ahead} job(s) ahead of this one."

        def target() -> None:
            try:
                if after is not None:
                    after.join()
                with waiting_notice(on_wait):
                    self.result = work(progress, self.stop)
            except Exception as e:  # the watchers show it
                self.error = e
            finally:
                self._done.set()

        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(target,), name=name,
                                        daemon=True)
        self._thread.start()


class SharedJobs:
    """SharedJobs by key, process-wide: a job outlives the page run (and the session) that started it, and every
    session asking for the same key follows the same job."""

    def __init__(self) -> None:
        self._jobs: dict[str, SharedJob] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> SharedJob | None:
        with self._lock:
            return self._jobs.get(key)

    def running(self, prefix: str = "") -> list[SharedJob]:
        """The jobs still running whose key starts with `prefix`."""
        with self._lock:
            return [job for key, job in self._jobs.items() if key.startswith(prefix) and job.running]

    def follow(self, key: str, work, watcher) -> SharedJob:
        """The running job of `key`, now followed by `watcher` too; else a new job of `work` followed by `watcher`.
        A new job started while a cancelled one of the key still winds down begins when that one is over, so one
        key never has two jobs running at once."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.attach(watcher):
                return job
            previous = job if job is not None and job.running else None
            job = self._jobs[key] = SharedJob(watcher)
            job._start(work, previous, f"longviz-job-{key[:40]}")
            return job


JOBS = SharedJobs()


def default_device():
    """torch.device("cuda") when a GPU is available, else the CPU (torch is imported here, not with the module:
    COMPUTE and BudgetLRU need no torch)."""
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def usable_device(device):
    """`device` (a name such as "cpu", "cuda", "cuda:1", "mps", or a torch.device) as a torch.device this machine
    has, else SettingsError saying which it has; None -> default_device()."""
    import torch

    from .errors import SettingsError

    if device is None:
        return default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise SettingsError(f"Unknown device {device!r} ({exc}); use 'cpu' or 'cuda'.") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SettingsError(f"Device {device!r} asked for, but this machine has no usable CUDA GPU (torch sees "
                            "none); use 'cpu', or leave the device out to pick one.")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise SettingsError(f"Device {device!r} asked for, but this machine has {torch.cuda.device_count()} "
                            "GPU(s), numbered from 0.")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise SettingsError(f"Device {device!r} asked for, but MPS is not available here; use 'cpu'.")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise SettingsError(f"Device {device!r} is not supported; use 'cpu' or 'cuda'.")
    return dev


class BudgetLRU:
    """A thread-safe least-recently-used map bounded by total bytes and entry count.

    Streamlit's caches bound entries, not memory; one 4,096-token analysis of a base model holds ~1.2 GB of
    attention, so the per-document cache is bounded by bytes. Each key is computed once even when several
    sessions ask at the same time (a per-key lock)."""

    def __init__(self, max_bytes: int, max_entries: int = 64) -> None:
        from collections import OrderedDict

        from .errors import whole_number

        self.max_bytes = whole_number(max_bytes, "max_bytes", lo=0)
        self.max_entries = whole_number(max_entries, "max_entries", lo=1)
        self._items: OrderedDict = OrderedDict()  # key -> (value, nbytes)
        self._lock = threading.Lock()
        self._key_locks: dict = {}
        self.computed = 0  # how many values were computed (not served from memory)

    def get_or_compute(self, key, compute: Callable[[], object], size_of: Callable[[object], int]):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key][0]
            value = compute()
            with self._lock:
                self.computed += 1
                self._items[key] = (value, int(size_of(value)))
                self._evict()
                self._key_locks.pop(key, None)
            return value

    def _evict(self) -> None:
        total = sum(size for _, size in self._items.values())
        while len(self._items) > 1 and (total > self.max_bytes or len(self._items) > self.max_entries):
            _, (_, size) = self._items.popitem(last=False)
            total -= size

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
