"""The precompute's settings: every option that changes a kind's numbers, checked when made and recorded per kind
in the store's manifest."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import whole_number

_SEQUENCES = {"importance_values": lambda row: tuple(float(x) for x in row), "mask_kinds": str, "layer_range": int,
              "rankings": str, "ks": float, "seeds": int, "faithfulness_layers": int, "explainers": str,
              "explainer_options": lambda t: (str(t[0]), str(t[1]), t[2])}


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers (recorded per kind in the manifest). None means the view's own
    default (evaluation.importance, views.similarity, views.agreement, evaluation.faithfulness)."""

    max_tokens: int = 2048
    grid: int = 64  # cells per axis of the pooled (dataset-wide) head maps
    n_steps: int = 50  # Integrated Gradients steps
    ig_method: str = "gausslegendre"
    # Class IG explains: "predicted" (as the agreement and faithfulness views do), "positive" (class 1, as the
    # paper's attribution figures), or a class index. |IG|, which agreement and faithfulness use, is the same
    # for either class of a binary classifier.
    target: str = "predicted"
    precision: str = "fp32"
    importance_docs: int | None = None  # labelled documents (first rows) for head importance; None = module default
    importance_method: str = "t3vis"  # head importance: "t3vis" (Taylor, T3-Vis) or "michel" (gate gradient)
    # (layers, heads) head importance to use instead of computing it (an imported file); needs no labels
    importance_values: tuple | None = None
    # agreement (Tables 1-2, per-head grids, top-5 % sets)
    rbo_p: float | None = None  # RBO persistence; None = views.similarity.DEFAULT_P
    top: float | None = None  # the top set's fraction; None = views.similarity.DEFAULT_TOP
    mask_kinds: tuple | None = None  # any of views.agreement.MASK_KINDS; None = all of them
    layer_range: tuple | None = None  # an extra attention source (lo, hi), 0-based inclusive
    # faithfulness (deletion curves, first flips)
    rankings: tuple | None = None  # None = evaluation.faithfulness.RANKINGS
    ks: tuple | None = None  # fractions removed; None = evaluation.faithfulness.KS
    replacement: str = "mask"  # what a removed token becomes: one of evaluation.deletion.REPLACEMENTS
    seeds: tuple | None = None  # the random ranking's seeds; None = evaluation.faithfulness.DEFAULT_SEEDS
    max_removed: float = 1.0  # the flip scan's limit, a fraction of the removable tokens
    flip_bound: int | None = None  # the flip scan's limit in tokens (the smaller limit applies); None = no bound
    faithfulness_layers: tuple | None = None  # the attention ranking's layers (0-based); None = all
    faithfulness_scaled: bool = False  # the attention ranking scaled by the store's head importance
    # the explainer leaderboard (also ks, seeds, replacement, max_removed, target; its IG: n_steps, ig_method,
    # precision)
    explainers: tuple | None = None  # methods of attribution.explainers.EXPLAINERS; None = all of them
    rank_by: str = "signed"  # deletion order: "signed" (score, high to low) or "magnitude" (|score|)
    explainer_options: tuple | None = None  # (method, option, value) triples for the explainers other than IG

    def __post_init__(self):
        for name, item in _SEQUENCES.items():  # lists (a command line, JSON, an array) kept as tuples: hashable
            value = getattr(self, name)
            if value is not None:
                try:
                    object.__setattr__(self, name, tuple(item(v) for v in value))
                except (TypeError, ValueError):
                    raise ValueError(f"{name} must be a sequence" + (" of rows (layers x heads)" if name ==
                                     "importance_values" else "") + f", got {value!r}") from None
        whole_number(self.max_tokens, "max_tokens", lo=3)
        whole_number(self.n_steps, "n_steps (captum's minimum is 2)", lo=2)
        if not (self.target in ("positive", "predicted") or str(self.target).isascii() and str(self.target).isdigit()):
            raise ValueError(f"target must be 'positive', 'predicted' or a class index, got {self.target!r}")
        if self.importance_docs is not None:
            whole_number(self.importance_docs, "importance_docs", lo=1)
        if self.importance_method not in ("t3vis", "michel"):
            raise ValueError(f"importance_method must be 't3vis' or 'michel', got {self.importance_method!r}")
        if self.rbo_p is not None and not 0 < float(self.rbo_p) < 1:
            raise ValueError(f"rbo_p must be in (0, 1), got {self.rbo_p}")
        if self.top is not None and not 0 < float(self.top) <= 1:
            raise ValueError(f"top must be in (0, 1], got {self.top}")
        if self.layer_range is not None and (len(self.layer_range) != 2 or not 0 <= self.layer_range[0]
                                             <= self.layer_range[1]):
            raise ValueError(f"layer_range must be (lo, hi) with 0 <= lo <= hi, got {self.layer_range}")
        from ...evaluation.deletion import REPLACEMENTS  # lazily: it imports torch

        if self.replacement not in REPLACEMENTS:
            raise ValueError(f"replacement must be one of {REPLACEMENTS}, got {self.replacement!r}")
        if not 0 < float(self.max_removed) <= 1:
            raise ValueError(f"max_removed must be a fraction in (0, 1], got {self.max_removed}")
        if self.flip_bound is not None:
            whole_number(self.flip_bound, "flip_bound (the flip scan's limit in tokens)", lo=1)


def mask_rule() -> str:
    from ...views.masking import RULE

    return RULE


def flip_bound(s: Settings) -> int | None:
    """The flip bound in tokens as the manifest records it: a store scanned to another bound is another store,
    never served as exact."""
    return None if s.flip_bound is None else int(s.flip_bound)
