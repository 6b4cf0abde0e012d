"""The faithfulness kind: per document AOPC / LOdds and the first decision flip of each ranking; its dataset-wide
summary."""
from __future__ import annotations

from ...errors import StoreError
from ..store.units import Record, load_unit
from .job import Doc, Job, Kind
from .settings import Settings, flip_bound, with_unit


def _faithfulness(job: Job, doc: Doc) -> Record:
    from ...evaluation.faithfulness import faithfulness

    cfg = _faithfulness_settings(job.settings)
    a = doc.analysis
    scale = load_unit(job.root, None, "head-importance").arrays["importance"] if cfg["scaled"] else None
    result = faithfulness(job.model, a, doc.load("attribution").arrays["scores"], layers=cfg["attention_layers"],
                          scale=scale, rankings=cfg["rankings"], ks=cfg["ks"], replacement=cfg["replacement"],
                          seeds=cfg["seeds"], max_removed=cfg["max_removed"], flip_bound=cfg["flip_bound"],
                          resume=job.use_cache, cache_dir=job.cache_dir, unit=cfg.get("unit", "token"))
    rows = result.table()
    rows.insert(0, "p_original", result.p_original)
    rows.insert(0, "n", result.n)
    rows.insert(0, "predicted", result.predicted)
    return Record(tables={"rows": rows})


def _faithfulness_settings(s: Settings) -> dict:
    from ...evaluation.faithfulness import DEFAULT_SEEDS, KS, RANKINGS, check_ks, check_settings

    rankings = list(RANKINGS if s.rankings is None else s.rankings)
    seeds = check_settings(rankings, None, DEFAULT_SEEDS if s.seeds is None else s.seeds, s.max_removed)
    return with_unit({"rankings": rankings, "ks": list(check_ks(KS if s.ks is None else s.ks)),
                      "replacement": s.replacement, "flip": "exact scan", "max_removed": float(s.max_removed),
                      "flip_bound": flip_bound(s), "seeds": list(seeds),
                      "attention_layers": None if s.faithfulness_layers is None else list(s.faithfulness_layers),
                      "scaled": bool(s.faithfulness_scaled)}, s)


KIND = Kind("faithfulness", ("attention", "attribution"), _faithfulness_settings, _faithfulness)


class FaithfulnessQueries:
    """ResultStore's query of the faithfulness kind."""

    def dataset_faithfulness(self):
        """The faithfulness summary over the documents for the settings the store was made with (its manifest's
        faithfulness settings: rankings, ks, replacement, seeds, scan limit, attention layers and scaling), as a
        DatasetFaithfulness: per ranking the mean and sd over documents (summarise_faithfulness)."""
        from ..aggregate import DatasetFaithfulness, summarise_faithfulness, with_doc

        rows = self.table("faithfulness", "rows")
        if rows.empty:
            raise StoreError("The store has no faithfulness results.")
        settings = self.settings("faithfulness")
        ks = tuple(settings["ks"])
        docs = self.documents()
        labels = dict(zip(docs["doc_id"], docs["label"])) if not docs.empty else {}
        per_doc = with_doc(rows)
        per_doc.insert(1, "label", [labels.get(d) for d in rows["doc_id"]])
        n = rows["doc_id"].nunique()
        return DatasetFaithfulness(per_doc, summarise_faithfulness(per_doc, ks), n, n, ks,
                                   settings.get("unit", "token"), float(settings["max_removed"]))

