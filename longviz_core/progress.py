"""Progress of long jobs, and the one way durations and times left are written for people.

Long jobs take a `Progress` callback (fraction done in [0, 1], message); `report` calls it when given. Every
message that states a duration or a time left goes through `format_seconds` / `eta_text`, so the whole app
writes them alike."""
from __future__ import annotations

import time
from typing import Callable

# Long jobs report (fraction done in [0, 1], human-readable message).
Progress = Callable[[float, str], None]


def report(progress: Progress | None, fraction: float, message: str) -> None:
    """Call `progress` if given; clamps the fraction so UI widgets never reject it."""
    if progress is not None:
        progress(min(max(float(fraction), 0.0), 1.0), message)


def prefixed(progress: Progress | None, prefix: str) -> Progress | None:
    """`progress` with `prefix` put before every message."""
    if progress is None:
        return None
    return lambda f, msg: progress(f, prefix + msg)


def scaled(progress: Progress | None, lo: float, width: float, prefix: str = "") -> Progress | None:
    """`progress` for a part of a job: fraction f of the part is lo + width * f of the whole."""
    if progress is None:
        return None
    return lambda f, msg: progress(lo + width * f, prefix + msg)


def format_seconds(s: float) -> str:
    """A duration for people: '42 s', '3.5 min', '1.2 h'."""
    s = max(0.0, float(s))
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def seconds_left(started: float, done: float, total: float, now: float | None = None) -> float | None:
    """Time left from the mean time per finished item (`started`: time.monotonic() at the start); None before
    the first item is done or once every item is."""
    if not done or done >= total:
        return None
    now = time.monotonic() if now is None else now
    return (now - started) / done * (total - done)


def eta_text(started: float, done: float, total: float, now: float | None = None) -> str:
    """', about 3.5 min left' (see seconds_left), or '' when there is no estimate yet (or nothing left)."""
    left = seconds_left(started, done, total, now)
    return "" if left is None else f", about {format_seconds(left)} left"
