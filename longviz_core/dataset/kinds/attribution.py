"""The attribution kind: per document Integrated Gradients' scores and their tables; its dataset-wide queries (the
attribution by token type)."""
from __future__ import annotations

import warnings

import pandas as pd

from ...errors import StoreError, whole_number
from ..store.units import Record, table_name
from .job import Doc, Job, Kind, target_class
from .settings import Settings, mask_rule


def _attribution(job: Job, doc: Doc) -> Record:
    from ...attribution.ig import ConvergenceWarning, integrated_gradients
    from ...views.attribution_tables import document_token_sums

    a = doc.analysis
    s = job.settings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded in the summary table instead
        attr = integrated_gradients(job.model, a, target_class(job, a), s.n_steps, s.ig_method, precision=s.precision,
                                    use_cache=job.use_cache, cache_dir=job.cache_dir)
    by_token = document_token_sums(a.tokens, attr.scores, job.model.tokenizer.all_special_tokens)
    summary = pd.DataFrame([{"target": attr.target, "n_steps": attr.n_steps, "total": attr.total, "delta": attr.delta,
                             "prob_input": attr.prob_input, "prob_baseline": attr.prob_baseline,
                             "converged": bool(attr.converged), "weak": attr.weak_explanation is not None}])
    return Record(arrays={"scores": attr.scores, "raw": attr.raw}, tables={"summary": summary, "by_token": by_token},
                  scalars={"target": attr.target, "delta": attr.delta})


def attribution_settings(s: Settings) -> dict:
    from ...attribution.ig import DELTA_WARN, SCORE_SCALE, validate_settings

    validate_settings(int(s.n_steps), s.ig_method, s.precision, None, DELTA_WARN, int(s.n_steps))  # before a manifest
    return {"n_steps": s.n_steps, "method": s.ig_method, "target": str(s.target), "precision": s.precision,
            "scores": SCORE_SCALE, "mask_rule": mask_rule()}


KIND = Kind("attribution", ("attention",), attribution_settings, _attribution)


class AttributionQueries:
    """ResultStore's queries of the attribution kind."""

    def attribution_by_token_type(self, target: int | None = None, masked: bool = False,
                                  min_docs: int = 1) -> pd.DataFrame:
        """Dataset-wide attribution by token type (Fig 10e/f) over every document with an attribution unit,
        see `aggregate.combine_token_sums`.

        target: the class the attributions should explain; None takes them as stored. A store whose IG
        explains each document's predicted class serves either class of a binary classifier: IG of the other
        class is the negation (p0 = 1 - p1), so those documents' sums change sign. masked=True leaves out
        the instances views.masking.build_mask masks (special, non-alphanumeric, stopwords); min_docs hides
        types found in fewer documents."""
        from ..aggregate import combine_token_sums

        if target is not None:
            target = whole_number(target, "target (the class explained)", lo=0)
        value, count = ("attribution_unmasked", "count_unmasked") if masked else ("attribution", "count")
        t, s = table_name("attribution", "by_token"), table_name("attribution", "summary")
        params: tuple = ()
        signed = f"b.{value}"
        if target is not None:
            targets = set(self.query("attribution", f'SELECT DISTINCT target FROM "{s}" '
                                     f'WHERE doc_id IN (SELECT doc_id FROM owned)')["target"].astype(int))
            if targets - {int(target)} and len(self.manifest["model"].get("id2label", {})) != 2:
                raise StoreError(f"The store's attributions explain classes {sorted(targets)}, not {target}; "
                                 f"precompute with --target {target}.")
            signed, params = f"CASE WHEN s.target = ? THEN b.{value} ELSE -b.{value} END", (int(target),)
        partial = self.query("attribution", f'SELECT b.token AS token, SUM({signed}) AS total_attribution, '
                             f'COUNT(DISTINCT b.doc_id) AS n_docs, SUM(b.{count}) AS occurrences FROM "{t}" b '
                             f'JOIN "{s}" s ON s.doc_id = b.doc_id WHERE b.doc_id IN (SELECT doc_id FROM owned) '
                             f'AND b.{count} > 0 GROUP BY b.token', params)
        n = self.count("attribution")
        if n == 0:
            raise StoreError("The store has no attribution results.")
        return combine_token_sums(partial, n, min_docs)

    def dataset_attributions(self, target: int, masked: bool = False, min_docs: int = 1):
        """The dataset-wide attribution table for class `target` as a DatasetAttribution (see
        attribution_by_token_type)."""
        from ..aggregate import DatasetAttribution

        table = self.attribution_by_token_type(target, masked, min_docs)
        return DatasetAttribution(table, int(target), int(self.settings("attribution")["n_steps"]),
                                  self.count("attribution"), f"store:{self.content_key()}", masked=bool(masked),
                                  min_docs=int(min_docs), from_cache=True)

