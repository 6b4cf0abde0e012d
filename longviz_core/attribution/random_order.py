"""The random ranking, defined once: a seeded permutation of a document's removable positions, used by the deletion
test's random baseline (evaluation.deletion) and by the 'random' explainer (attribution.explainers)."""
from __future__ import annotations

import numpy as np

from ..errors import LongvizError, whole_number


class RandomOrderError(LongvizError, ValueError):
    """A document without a text token between its special tokens, or a seed that is not a whole number >= 0."""


def random_order(n: int, seed: int = 0, prefix: int = 1, suffix: int = 1) -> np.ndarray:
    """A seeded random permutation of the removable positions prefix .. n-1-suffix, the text tokens between the
    `prefix` special tokens before them and the `suffix` after (<s> and </s>: 1 .. n-2; numpy's
    default_rng(seed))."""
    seed = whole_number(seed, "seed (of the random order)", lo=0, error=RandomOrderError)
    m = n - prefix - suffix
    if m < 1:
        raise RandomOrderError(f"a document needs at least one text token between its {prefix + suffix} special "
                               f"tokens, got n={n}")
    return (np.random.default_rng(seed).permutation(m) + prefix).astype(np.int64)  # (m,)


__all__ = ["RandomOrderError", "random_order"]
