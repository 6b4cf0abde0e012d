"""The kinds of dataset-wide results: each is a small function of one document (or, for head importance, of the
dataset) that returns a store.Record; dataset.run computes them into a store.

Kinds and what they store per document:
    attention        received (layers, heads, n) float32: attention each token receives, per head;
                     pooled (layers, heads, g, g) float32: the head maps on relative positions (dataset grid);
                     input_ids (n,); table `document` (row, label, predicted, prob_<class>, n_tokens, ...);
                     table `counts`: the paper-rule top-k counts by token type (views.counts.token_counts at
                     COUNTS: k = 10, all layers and heads) for both directions, unmasked and masked; table
                     `word_counts`: the same counts by word, from the same top-k lists
    attribution      scores (n,) float64 Integrated Gradients, L2-normalised (what every view uses), raw (n,) the
                     per-token sums before normalising; tables `summary` (target, total, delta, F(x), F(x'),
                     converged, weak) and `by_token` (views.attribution_tables.document_token_sums)
    head-importance  (dataset level) importance (layers, heads) by `importance_method` (default T3-Vis's
                     Taylor scores, see evaluation/importance.py), normalised as that method does, and raw; or the
                     values given in Settings.importance_values (an imported file, the API's `importance=`)
    agreement        tables `rows` (Tables 1-2), `heads` (every head's agreement with |IG|), `sets` (top-5 % sets)
    faithfulness     table `rows`: AOPC / LOdds at each k and the first decision flip (exact scan) per ranking
                     (evaluation.deletion: the deletion test's summary of its runs); the random row: means and sds
                     over its seeds
    leaderboard      table `runs`: the explainer leaderboard's runs (dataset.leaderboard.document_leaderboard):
                     one row per explainer, one per seed for random, with AOPC / LOdds at each k, the first flip and
                     the explanation's cost (seconds, peak memory)
Every option that changes a kind's numbers is a field of Settings and is recorded in the store's manifest (the
kind's `settings`), so a store is only ever read for the settings it was made with.
"""
from __future__ import annotations

from . import agreement, attention, attribution, faithfulness, head_importance, leaderboard
from .attention import COUNT_TABLES, COUNTS
from .job import Doc, Job, Kind
from .settings import Settings

ALL_KINDS = ("attention", "attribution", "head-importance", "agreement", "faithfulness",
             "leaderboard")  # dependency order

KINDS: dict[str, Kind] = {k.name: k for k in (attention.KIND, attribution.KIND, head_importance.KIND, agreement.KIND,
                                                faithfulness.KIND, leaderboard.KIND)}


def kind_names(what) -> list[str]:
    """The kinds named in `what` (a comma-separated string or a list), as given."""
    return [w.strip() for w in (what.split(",") if isinstance(what, str) else what) if w and w.strip()]


def resolve_kinds(what, settings: Settings | None = None) -> tuple[str, ...]:
    """Validated kinds plus the kinds they depend on, in dependency order (faithfulness with an attention ranking
    scaled by head importance also needs head importance)."""
    names = kind_names(what)
    if not names:
        raise ValueError(f"choose at least one of {', '.join(ALL_KINDS)}")
    unknown = [w for w in names if w not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(ALL_KINDS)}")
    wanted = set()

    def add(k):
        if k not in wanted:
            wanted.add(k)
            for dep in KINDS[k].needs:
                add(dep)

    for w in names:
        add(w)
    if "faithfulness" in wanted and settings is not None and settings.faithfulness_scaled:
        add("head-importance")
    return tuple(k for k in ALL_KINDS if k in wanted)


__all__ = ["ALL_KINDS", "COUNTS", "COUNT_TABLES", "KINDS", "Doc", "Job", "Kind", "Settings", "kind_names",
           "resolve_kinds"]
