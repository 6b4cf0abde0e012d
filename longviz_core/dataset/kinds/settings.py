"""The precompute's settings: every option that changes a kind's numbers, checked when made and recorded per kind
in the store's manifest."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import SettingsError, items, real_number, whole_number

# lists and how each item is read: INDEX a whole number >= 0 (a layer, a seed), FRACTION a number in (0, 1],
# anything else a converter (TypeError / ValueError: not a list of those)
INDEX, FRACTION = "a whole number >= 0", "a fraction in (0, 1]"
_SEQUENCES = {"importance_values": lambda row: tuple(float(x) for x in row), "mask_kinds": str,
              "layer_range": INDEX, "rankings": str, "ks": FRACTION, "seeds": INDEX, "faithfulness_layers": INDEX,
              "explainers": str, "explainer_options": lambda t: (str(t[0]), str(t[1]), t[2])}


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
    # what the faithfulness and leaderboard kinds' deletion test removes: model.segments.UNITS (ks, max_removed
    # and flip_bound then count these units)
    unit: str = "token"
    # the explainer leaderboard (also ks, seeds, replacement, max_removed, target; its IG: n_steps, ig_method,
    # precision)
    explainers: tuple | None = None  # methods of attribution.explainers.EXPLAINERS; None = DEFAULT_METHODS
    rank_by: str = "signed"  # deletion order: "signed" (score, high to low) or "magnitude" (|score|)
    explainer_options: tuple | None = None  # (method, option, value) triples for the explainers other than IG

    def __post_init__(self):
        for name, item in _SEQUENCES.items():  # lists (a command line, JSON, an array) kept as tuples: hashable
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(_read(item, v, name) for v in items(value, name)))
        # counts through errors.whole_number, fractions through errors.real_number: NaN, infinity, 2.5, True and
        # "3" are refused by name, not rounded or read (the store's manifest records what was checked here)
        object.__setattr__(self, "max_tokens", whole_number(self.max_tokens, "max_tokens", lo=3))
        object.__setattr__(self, "n_steps", whole_number(self.n_steps, "n_steps (captum's minimum is 2)", lo=2))
        from ...views.pooling import check_grid  # lazily, as below: it imports the compiled kernels

        object.__setattr__(self, "grid", check_grid(self.grid))
        if not (self.target in ("positive", "predicted") or str(self.target).isascii() and str(self.target).isdigit()):
            raise SettingsError(f"target must be 'positive', 'predicted' or a class index, got {self.target!r}")
        if self.importance_docs is not None:
            object.__setattr__(self, "importance_docs", whole_number(self.importance_docs, "importance_docs", lo=1))
        if self.importance_method not in ("t3vis", "michel"):
            raise SettingsError(f"importance_method must be 't3vis' or 'michel', got {self.importance_method!r}")
        if self.rbo_p is not None:
            object.__setattr__(self, "rbo_p", real_number(self.rbo_p, "rbo_p", 0, 1, above=True, below=True))
        if self.top is not None:
            object.__setattr__(self, "top", real_number(self.top, "top", 0, 1, above=True))
        if self.layer_range is not None and (len(self.layer_range) != 2 or self.layer_range[0] > self.layer_range[1]):
            raise SettingsError(f"layer_range must be (lo, hi) with 0 <= lo <= hi, got {self.layer_range}")
        from ...evaluation.deletion import REPLACEMENTS  # lazily: it imports torch

        if self.replacement not in REPLACEMENTS:
            raise SettingsError(f"replacement must be one of {REPLACEMENTS}, got {self.replacement!r}")
        from ...model.segments import UNITS

        if self.unit not in UNITS:
            raise SettingsError(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        object.__setattr__(self, "max_removed", real_number(self.max_removed, "max_removed (a fraction of the "
                                                            "removable tokens)", 0, 1, above=True))
        if self.flip_bound is not None:
            object.__setattr__(self, "flip_bound", whole_number(
                self.flip_bound, "flip_bound (the flip scan's limit in tokens)", lo=1))


def _read(item, value, name: str):
    """One item of the list setting `name`, read as _SEQUENCES says."""
    if item == INDEX:
        return whole_number(value, f"every value of {name}", lo=0)
    if item == FRACTION:
        return real_number(value, f"every value of {name}", 0, 1, above=True)
    try:
        return item(value)
    except (TypeError, ValueError, IndexError):
        raise SettingsError(f"{name} must be a list" + (" of rows (layers x heads)" if name == "importance_values"
                            else "") + f", got an item {value!r}") from None


def mask_rule() -> str:
    from ...views.masking import RULE

    return RULE


def with_unit(settings: dict, s: Settings) -> dict:
    """A kind's manifest settings with the deletion unit, named only when it is not "token": stores made before
    units existed keep their settings, and a store by units is another store."""
    return settings if s.unit == "token" else {**settings, "unit": s.unit}


def flip_bound(s: Settings) -> int | None:
    """The flip bound in tokens as the manifest records it: a store scanned to another bound is another store,
    never served as exact."""
    return None if s.flip_bound is None else int(s.flip_bound)
