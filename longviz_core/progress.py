"""Small shared types. Result dataclasses live next to the code that builds them."""
from __future__ import annotations

from typing import Callable

# Long jobs report (fraction done in [0, 1], human-readable message).
Progress = Callable[[float, str], None]


def report(progress: Progress | None, fraction: float, message: str) -> None:
    """Call `progress` if given; clamps the fraction so UI widgets never reject it."""
    if progress is not None:
        progress(min(max(float(fraction), 0.0), 1.0), message)
