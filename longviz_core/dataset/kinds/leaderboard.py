"""The leaderboard kind: per document the explainer leaderboard's runs; its dataset-wide query."""
from __future__ import annotations

import pandas as pd

from ...errors import StoreError
from ..store.units import Record
from .attribution import attribution_settings
from .job import Doc, Job, Kind, target_class
from .settings import Settings, flip_bound, with_unit


def _leaderboard(job: Job, doc: Doc) -> Record:
    from ..leaderboard import document_leaderboard

    cfg = _leaderboard_settings(job.settings)
    a = doc.analysis
    options = {m: dict(o) for m, o in cfg["options"].items()}
    # IG is computed here rather than read from the attribution kind: its scores would be the same (attribution
    # stores integrated_gradients' L2-normalised scores, which the 'ig' explainer returns), but the leaderboard's
    # row holds IG's cost (seconds, peak memory), which an attribution unit does not record, and a leaderboard
    # without IG must not need attention and attribution units. In-process runs share IG's per-document disk
    # cache with the attribution kind (same key), so the app computes it once.
    if cfg["ig"] is not None:
        options["ig"] = {"n_steps": cfg["ig"]["n_steps"], "method": cfg["ig"]["method"],
                         "precision": cfg["ig"]["precision"], "use_cache": job.use_cache, "cache_dir": job.cache_dir}
    target = None if job.settings.target == "predicted" else target_class(job, a)
    runs = document_leaderboard(job.model, a, cfg["methods"], target, ks=cfg["ks"], seeds=cfg["seeds"] or (),
                                replacement=cfg["replacement"], max_removed=cfg["max_removed"],
                                flip_bound=cfg["flip_bound"], rank_by=cfg["rank_by"], options=options,
                                resume=job.use_cache, cache_dir=job.cache_dir, unit=cfg.get("unit", "token"))
    return Record(tables={"runs": runs})


def _leaderboard_settings(s: Settings) -> dict:
    from ...attribution.explainers import DEFAULT_METHODS, check_options
    from ...evaluation.faithfulness import DEFAULT_SEEDS, KS, check_ks, check_settings
    from ..leaderboard import check_methods

    methods = list(DEFAULT_METHODS if s.explainers is None else s.explainers)
    options: dict = {}
    for method, option, value in s.explainer_options or ():
        options.setdefault(method, {})[option] = value
    check_methods(methods, s.rank_by, s.replacement, options)
    if "ig" in options:
        raise ValueError("the leaderboard's IG takes the settings' n_steps, ig_method and precision, not "
                         "explainer_options")
    for method, opts in options.items():  # names and values (ExplainerError, a ValueError), before any document
        check_options(method, opts)
    # the seeds change the numbers only when random is chosen (as IG's settings only when IG is)
    seeds = (check_settings(["random"], None, DEFAULT_SEEDS if s.seeds is None else s.seeds, s.max_removed)
             if "random" in methods else None)
    ig = attribution_settings(s) if "ig" in methods else None
    return with_unit({"methods": methods, "target": str(s.target), "rank_by": s.rank_by,
                      "ks": list(check_ks(KS if s.ks is None else s.ks)), "replacement": s.replacement,
                      "flip": "exact scan", "max_removed": float(s.max_removed), "flip_bound": flip_bound(s),
                      "seeds": None if seeds is None else list(seeds),
                      "ig": None if ig is None else {k: ig[k] for k in ("n_steps", "method", "precision", "scores")},
                      "options": options}, s)


KIND = Kind("leaderboard", (), _leaderboard_settings, _leaderboard)


class LeaderboardQueries:
    """ResultStore's query of the leaderboard kind."""

    def leaderboard_runs(self) -> pd.DataFrame:
        """Every document's explainer leaderboard runs (dataset.leaderboard.run_columns at the store's ks) with the
        dataset row `doc` first: what dataset.leaderboard.summarise, curves and flips take. The runs were made
        with the settings in the manifest's leaderboard entry."""
        from ..aggregate import with_doc

        rows = self.table("leaderboard", "runs")
        if rows.empty:
            raise StoreError("The store has no leaderboard results.")
        return with_doc(rows)

