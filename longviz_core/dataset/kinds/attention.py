"""The attention kind: per document the attention each token receives, the pooled head maps and the token counts;
its dataset-wide queries (the pooled grid, the counts by type and by word)."""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from ...errors import StoreError
from ..store.units import Record, table_name
from .job import Doc, Job, Kind
from .settings import Settings, mask_rule

# The token counts the attention kind stores: the Token counts page's dataset scope shows them at these settings,
# grouped by each of `groups` (table "counts" by token type, "word_counts" by word).
COUNTS = {"k": 10, "rule": "paper", "groups": ("type", "word"), "layers": "all", "heads": "all"}
COUNT_TABLES = {"type": "counts", "word": "word_counts"}  # the table of each group (AttentionQueries._counts)


def _attention(job: Job, doc: Doc) -> Record:
    from ...views.pooling import pool_dataset

    a = doc.analysis
    enc = a.encoded
    document = {"row": doc.row, "text_hash": a.text_hash, "n_tokens": enc.n, "n_text_tokens":
                enc.n_text_tokens_original, "truncated": bool(enc.truncated),
                "label": doc.label if doc.label is not None else pd.NA, "predicted": a.predicted}
    document.update({f"prob_{c}": float(p) for c, p in enumerate(a.probs)})
    table = pd.DataFrame([document]).astype({"label": "Int64"})
    return Record(
        arrays={
            "received": a.attention.received_per_head(),  # (layers, heads, n) float32
            # relative-position cells of this one document: their mean over documents is pool_dataset's
            "pooled": pool_dataset([a.attention], job.settings.grid).cells,  # (layers, heads, g, g)
            "input_ids": enc.input_ids,  # (n,)
        },
        tables={"document": table, **_counts(a)},
    )


def _counts(analysis) -> dict[str, pd.DataFrame]:
    """The document's token counts at COUNTS by each group, both directions, unmasked and masked (the Token counts
    page's mask), as the attention kind's tables (COUNT_TABLES): columns direction, masked, token (by type) or word
    (by word), count, each part in token_counts' order. One set of top-k lists and one tally per mask serve
    every group."""
    from ...model.topk import DIRECTIONS, topk_indices
    from ...views.counts import GROUP_COLUMNS, tally, token_counts
    from ...views.masking import build_mask, special_tokens_of

    topk = topk_indices(analysis.attention, k=COUNTS["k"])
    parts = {group: [] for group in COUNTS["groups"]}
    for masked in (False, True):
        tallies = tally(topk, analysis.tokens, build_mask(analysis.tokens, special_tokens=special_tokens_of(
            analysis.encoded)) if masked else None)
        for group, direction in ((g, d) for g in COUNTS["groups"] for d in DIRECTIONS):
            table = token_counts(analysis, COUNTS["k"], direction, group, mask=tallies.mask, tallies=tallies,
                                 rule=COUNTS["rule"])
            parts[group].append(table.assign(direction=direction, masked=masked)[
                ["direction", "masked", GROUP_COLUMNS[group], "count"]])
    return {COUNT_TABLES[group]: pd.concat(tables, ignore_index=True).astype({"count": "int64"})
            for group, tables in parts.items()}


def _attention_settings(s: Settings) -> dict:
    from ...views.pooling import check_grid

    return {"grid": check_grid(s.grid), "pooling": "relative",
            "counts": {**COUNTS, "groups": list(COUNTS["groups"])}, "mask_rule": mask_rule()}


KIND = Kind("attention", (), _attention_settings, _attention)


class AttentionQueries:
    """ResultStore's queries of the attention kind."""

    def pooled_attention(self, doc_ids: Iterable[str] | None = None):
        """The dataset-wide heatmap grid as views.pooling.PooledAttention: the mean of the documents'
        relative-position pooled maps, cells (layers, heads, g, g), exactly what pooling.pool_dataset gives."""
        from ...views.pooling import PooledAttention
        from ..aggregate import mean_arrays

        ids = list(doc_ids) if doc_ids is not None else self.doc_ids("attention")
        cells = mean_arrays(self.array(d, "attention", "pooled") for d in ids)
        return PooledAttention(cells, np.linspace(0.0, 1.0, cells.shape[-1] + 1), len(ids), relative=True)

    def type_counts(self, direction: str = "attended", masked: bool = False) -> pd.DataFrame:
        """Dataset-wide top-k counts by token type (aggregate.dataset_type_counts: per type the sum over
        documents of its paper-rule count, and the documents counting it), from the attention kind's per-document
        tables at the manifest's fixed `counts` settings (k = 10, all layers and heads). masked: the counts with
        the Token counts page's mask (special tokens, non-alphanumeric, stopwords). Columns token, count,
        documents."""
        return self._counts("type", direction, masked)

    def word_counts(self, direction: str = "attended", masked: bool = False) -> pd.DataFrame:
        """As `type_counts`, by word (views.counts' "By word"): columns word, count, documents."""
        return self._counts("word", direction, masked)

    def _counts(self, group: str, direction: str, masked: bool) -> pd.DataFrame:
        from ...model.topk import DIRECTIONS
        from ...views.counts import GROUP_COLUMNS
        from ..aggregate import dataset_type_counts

        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if self.count("attention") == 0:
            raise StoreError("The store has no attention results.")
        t = table_name("attention", COUNT_TABLES[group])
        column = GROUP_COLUMNS[group]
        # per index: each group's sum, documents and first appearance (document, row), so ties keep the order
        # in which the groups first appear in the documents' tables, however the documents are sharded
        partial = self.query("attention", f'SELECT "{column}", SUM("count") AS "count", COUNT(*) AS documents, '
                             f"MIN(doc_id || printf('%09d', _i)) AS first FROM \"{t}\" WHERE doc_id IN "
                             f'(SELECT doc_id FROM owned) AND direction = ? AND masked = ? GROUP BY "{column}"',
                             (direction, int(bool(masked))))
        if partial.empty:
            return dataset_type_counts([pd.DataFrame({column: pd.Series(dtype=object),
                                                      "count": pd.Series(dtype=np.int64)})])
        first = partial.groupby(column)["first"].transform("min")
        partial = partial.assign(first=first).sort_values(["first", column], kind="stable")
        return dataset_type_counts([partial[[column, "count", "documents"]]])

