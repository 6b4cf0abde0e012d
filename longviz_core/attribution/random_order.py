"""The random ranking, defined once: a seeded permutation of a document's removable positions, used by the deletion
test's random baseline (evaluation.deletion) and by the 'random' explainer (attribution.explainers)."""
from __future__ import annotations

import numpy as np

from ..errors import LongvizError


class RandomOrderError(LongvizError, ValueError):
    """A document without a text token between <s> and </s>."""


def random_order(n: int, seed: int = 0) -> np.ndarray:
    """A seeded random permutation of the removable positions 1 .. n-2 (numpy's default_rng(seed))."""
    if n < 3:
        raise RandomOrderError(f"a document needs at least one text token between <s> and </s>, got n={n}")
    return (np.random.default_rng(int(seed)).permutation(n - 2) + 1).astype(np.int64)  # (n-2,)


__all__ = ["RandomOrderError", "random_order"]
