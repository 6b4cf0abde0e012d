"""The agreement kind: per document Tables 1-2, every head's agreement and the top-5 % sets; its dataset-wide
queries (the head grids, the set counts, Tables 1-2 over the documents)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...errors import StoreError
from ..store.units import Record, load_unit, table_name
from .job import Doc, Job, Kind
from .settings import Settings, mask_rule


def _agreement(job: Job, doc: Doc) -> Record:
    from ...views.agreement import document_numbers, mask_for
    from ...views.masking import special_tokens_of

    cfg = _agreement_settings(job.settings)
    a = doc.analysis
    scores = doc.load("attribution").arrays["scores"]
    try:
        importance = load_unit(job.root, None, "head-importance").arrays["importance"]
    except StoreError:  # an unlabelled dataset has no head importance: unscaled rows only
        importance = None
    mask = mask_for(a.tokens, cfg["mask"], special_tokens=special_tokens_of(a.encoded))
    numbers = document_numbers(a, scores, importance, mask, cfg["layer_range"], cfg["p"], cfg["top"])
    heads = [{"metric": metric, "masked": masked, "layer": layer, "head": head, "value": value}
             for key, grid in numbers["grids"].items() for metric, masked in [key.split("|")]
             for layer, row in enumerate(grid) for head, value in enumerate(row)]
    sets = [{"source": source, "scaled": bool(int(scaled)), "masked": masked, "token": token,
             "attention_only": v[0], "attribution_only": v[1], "both": v[2]}
            for key, table in numbers["counts"].items() for source, scaled, masked in [key.split("|")]
            for token, v in table.items()]
    heads_df = pd.DataFrame(heads, columns=["metric", "masked", "layer", "head", "value"]).astype({"value": float})
    sets_df = pd.DataFrame(sets, columns=["source", "scaled", "masked", "token", "attention_only",
                                          "attribution_only", "both"])
    return Record(tables={"rows": numbers["table"], "heads": heads_df, "sets": sets_df})


def _agreement_settings(s: Settings) -> dict:
    from ...views.agreement import MASK_KINDS
    from ...views.similarity import DEFAULT_P, DEFAULT_TOP

    kinds = MASK_KINDS if s.mask_kinds is None else s.mask_kinds
    unknown = set(kinds) - set(MASK_KINDS)
    if unknown:
        raise ValueError(f"unknown mask kind(s) {sorted(unknown)}; choose from {list(MASK_KINDS)}")
    return {"p": DEFAULT_P if s.rbo_p is None else float(s.rbo_p),
            "top": DEFAULT_TOP if s.top is None else float(s.top),
            "mask": [k for k in MASK_KINDS if k in kinds], "mask_rule": mask_rule(),
            "layer_range": None if s.layer_range is None else list(s.layer_range)}


KIND = Kind("agreement", ("attention", "attribution", "head-importance"), _agreement_settings, _agreement)


class AgreementQueries:
    """ResultStore's queries of the agreement kind."""

    def head_agreement(self, metric: str = "rbo", masked: str = "no") -> np.ndarray:
        """Mean over documents of every head's agreement (layers, heads); NaN values (dead heads) skipped."""
        from ..aggregate import combine_head_means

        t = table_name("agreement", "heads")
        partial = self.query("agreement", f'SELECT layer, head, SUM(value) AS total, COUNT(value) AS n FROM "{t}" '
                             f'WHERE doc_id IN (SELECT doc_id FROM owned) AND metric = ? AND masked = ? '
                             f'GROUP BY layer, head', (metric, masked))
        model = self.manifest["model"]
        return combine_head_means(partial, model["num_layers"], model["num_heads"])

    def top_set_counts(self, source: str, scaled: bool, masked: str) -> pd.DataFrame:
        """Token types in the top-5 % sets summed over documents for one configuration: token, attention only,
        attribution only, both, total (descending)."""
        from ..aggregate import combine_set_counts

        t = table_name("agreement", "sets")
        partial = self.query("agreement", f'SELECT token, SUM(attention_only) AS a, SUM(attribution_only) AS b, '
                             f'SUM(both) AS c FROM "{t}" WHERE doc_id IN (SELECT doc_id FROM owned) AND source = ? '
                             f'AND scaled = ? AND masked = ? GROUP BY token', (source, int(bool(scaled)), masked))
        return combine_set_counts(partial)

    def dataset_agreement(self):
        """Tables 1-2, the per-head grids and the top-set counts over the documents, for the configuration the
        store was made with (its manifest's agreement settings: p, top, mask kinds, layer range), as a
        DatasetAgreement: Tables 1-2 by summarise_agreement, per-head grids and top-set counts summed in SQL."""
        from ..aggregate import DatasetAgreement, summarise_agreement, with_doc

        rows = self.table("agreement", "rows")
        if rows.empty:
            raise StoreError("The store has no agreement results.")
        grids = self.query("agreement", f'SELECT DISTINCT metric, masked FROM "{table_name("agreement", "heads")}"'
                           ' WHERE doc_id IN (SELECT doc_id FROM owned)')
        configs = self.query("agreement", f'SELECT DISTINCT source, scaled, masked FROM '
                             f'"{table_name("agreement", "sets")}" WHERE doc_id IN (SELECT doc_id FROM owned)')
        n = rows["doc_id"].nunique()
        return DatasetAgreement(
            per_document=with_doc(rows),
            table=summarise_agreement(rows),
            head_grids={(m, k): self.head_agreement(m, k) for m, k in
                        sorted(set(grids.itertuples(index=False, name=None)))},
            set_counts={(src, bool(sc), k): self.top_set_counts(src, bool(sc), k) for src, sc, k in
                        sorted(set(configs.itertuples(index=False, name=None)))},
            n_documents=n, from_cache=n,
        )

