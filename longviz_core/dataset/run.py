"""The precompute engine: every document's attention, attribution, agreement, faithfulness and explainer
leaderboard results (the kinds of dataset.kinds), written into a ResultStore (dataset.store) one atomic unit at a
time, resumable and shardable (dataset.ray runs the shards on a cluster).

The command line, Ray, the app's "compute for the dataset" buttons and the Python API's dataset functions
(dataset.api) all run this one precompute: in-process runs go into a local store under the cache root
(dataset.stores), and every dataset-wide number is read back through the store's aggregation methods.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .._disk import METADATA_BYTES, file_lock, open_own, package_versions, read_file
from .._version import __version__
from ..attribution.explainers import DEFAULT_METHODS, check_options
from ..errors import DatasetError, SelectionError, SettingsError, StoreError, items, whole_number
from ..model.encoding import DEFAULT_MAX_TOKENS
from ..model.loading import LoadedModel, dataset_fingerprint
from ..progress import Progress, format_seconds, report
from ..evaluation.faithfulness import DEFAULT_SEEDS, KS
from . import leaderboard as lb
from .folders import check_store_target
from .kinds import KINDS, Doc, Job, Settings, kind_names, resolve_kinds
from .store import ResultStore, StoreWriter, open_manifest
from .store.units import LOG, is_link, link_problem

_DEFAULT_PACKAGES = ("torch", "transformers", "captum", "numpy", "pandas", "pyarrow", "scipy", "rbo", "nltk")


# ============================================================================================ the run
def parse_shard(spec: str) -> tuple[int, int]:
    """'i/N' -> (i, N) with 0 <= i < N."""
    try:
        i, n = (int(x) for x in str(spec).split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like i/N (e.g. 0/4), got {spec!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {spec}: need 0 <= i < N")
    return i, n


def shard_rows(n_documents: int, shard: tuple[int, int] = (0, 1), limit: int | None = None) -> list[int]:
    """The dataset rows shard (i, N) computes: rows r < limit with r % N == i. Row order interleaves long and
    short documents, so shards get similar work; the split depends on nothing but (i, N, limit)."""
    i, n = check_shard(shard)
    stop = n_documents if limit is None else min(n_documents, whole_number(limit, "limit (documents)", lo=0))
    return list(range(i, stop, n))


def check_shard(shard) -> tuple[int, int]:
    """(i, N) as ints with 0 <= i < N, else SettingsError."""
    shard = items(shard, "shard (i, N)")
    if len(shard) != 2:
        raise SettingsError(f"shard must be (i, N) with 0 <= i < N, got {shard}")
    i, n = whole_number(shard[0], "shard's i", lo=0), whole_number(shard[1], "shard's N (shards)", lo=1)
    if i >= n:
        raise SettingsError(f"shard must be (i, N) with 0 <= i < N, got {shard}")
    return i, n


def build_manifest(model: LoadedModel, df: pd.DataFrame, settings: Settings, kinds, model_source: str | None = None,
                   dataset_source: str | None = None) -> dict:
    return {
        "model": {"fingerprint": model.fingerprint, "source": model_source or model.source,
                  "num_layers": model.num_layers, "num_heads": model.num_heads,
                  "id2label": {str(k): v for k, v in model.id2label.items()}},
        "dataset": {"fingerprint": dataset_fingerprint(df), "source": dataset_source, "n_documents": int(len(df))},
        "max_tokens": int(settings.max_tokens),
        "kinds": {k: KINDS[k].settings(settings) for k in kinds},
        "versions": manifest_versions(),
    }


def manifest_versions() -> dict:
    """What a store's manifest records: Python, longviz_core and the packages that can change the numbers."""
    return {"python": platform.python_version(), "longviz_core": __version__, **package_versions(_DEFAULT_PACKAGES)}


@dataclass(frozen=True)
class RunSummary:
    out: Path
    kinds: tuple
    shard: tuple
    documents: int  # rows of this shard
    computed: dict = field(default_factory=dict)  # kind -> units computed by this run
    skipped: dict = field(default_factory=dict)  # kind -> units found done
    seconds: float = 0.0


def precompute(
    model: LoadedModel,
    df: pd.DataFrame,
    out,
    what="attention",
    settings: Settings = Settings(),
    shard: tuple[int, int] = (0, 1),
    limit: int | None = None,
    progress: Progress | None = None,
    show_bar: bool = False,
    model_source: str | None = None,
    dataset_source: str | None = None,
    allow_version_change: bool = False,
    *,
    use_cache: bool = False,
    cache_dir=None,
    wait: bool = False,
) -> RunSummary:
    """Compute the kinds `what` (dataset.kinds) for the rows of `shard` (see shard_rows) into the store at `out`.

    Resumable: units already on disk are skipped. Refuses (ManifestMismatchError) to add to a store made
    with another model, dataset or settings. `show_bar` draws a tqdm bar with ETA (the CLI); `progress`
    gets (fraction, message) after every document: documents done / total and the time left, from the measured
    time of the documents this run computed (those found done cost nothing). An exception raised by `progress`
    (the app's Stop button, a closed tab) ends the run there; every committed unit stays.
    use_cache / cache_dir: see kinds.Job (in-process runs). `wait`: where another run is writing this shard,
    wait for it (telling `progress`) and then skip what it wrote, instead of refusing (StoreWriter)."""
    if "text" not in df:
        raise ValueError("the dataset needs a 'text' column (load it with load_dataset)")
    # every setting is checked before the first byte is written: a refused run leaves no manifest behind that
    # would refuse the corrected command into the same folder
    kinds = run_kinds(df, what, settings)
    settings = clamped(model, settings)
    shard_rows(len(df), shard, limit)
    check_settings(model, settings, kinds)
    manifest = build_manifest(model, df, settings, kinds, model_source, dataset_source)  # the kinds' own checks
    out = check_store_target(out)
    open_manifest(out, manifest, allow_version_change)
    i, n = check_shard(shard)
    rows = shard_rows(len(df), shard, limit)
    started = time.monotonic()
    computed = {k: 0 for k in kinds}
    skipped = {k: 0 for k in kinds}
    writer_name = f"shard-{i}-of-{n}"
    with StoreWriter(out, writer_name, wait=wait, progress=progress) as writer:
        job = Job(model, df, settings, out, use_cache=use_cache, cache_dir=cache_dir)
        for k in (k for k in kinds if KINDS[k].dataset_level):
            if _dataset_unit(job, writer, k, progress):
                computed[k] += 1
            else:
                skipped[k] += 1
        doc_kinds = [k for k in kinds if not KINDS[k].dataset_level]
        labels = df["label"].to_numpy() if "label" in df else None
        bar = tqdm_bar(len(rows), f"{writer_name}: {','.join(doc_kinds)}") if show_bar else None
        log = _Log(out, writer_name)
        worked = _Timer()  # the documents this run computed something for
        try:
            for done, row in enumerate(rows):
                doc = Doc(row, df["text"].iloc[row], int(labels[row]) if labels is not None else None, job)
                t_doc = time.monotonic()
                did = False
                for k in doc_kinds:
                    if writer.holds(doc.doc_id, k, doc.text):  # this store's unit of this text (not a copy)
                        if not writer.indexed(doc.doc_id, k):  # its writer died between rename and index
                            writer.index_from_files(doc.doc_id, k)
                        skipped[k] += 1
                        continue
                    t0 = time.monotonic()
                    record = KINDS[k].compute(job, doc)
                    did = True
                    if writer.commit(doc.doc_id, k, record, doc.text):
                        computed[k] += 1
                        log.write(doc.doc_id, k, time.monotonic() - t0)
                if did:
                    worked.add(time.monotonic() - t_doc)
                if bar is not None:
                    bar.update(1)
                report(progress, (done + 1) / max(len(rows), 1),
                       f"document {done + 1}/{len(rows)}{worked.left(len(rows) - done - 1)}")
        finally:
            if bar is not None:
                bar.close()
    return RunSummary(out, kinds, shard, len(rows), computed, skipped, time.monotonic() - started)


def check_settings(model: LoadedModel, settings: Settings, kinds) -> None:
    """The settings of a run of `kinds` that depend on the model, checked against it (SettingsError or
    SelectionError naming the setting and what this model accepts). With Settings' own checks and the kinds'
    (build_manifest), every setting is checked before precompute writes anything."""
    if {"attribution", "leaderboard"} & set(kinds) and str(settings.target).isdigit():
        whole_number(int(settings.target), f"target (--target: the class explained; this model has "
                     f"{model.num_labels})", lo=0, hi=model.num_labels - 1)
    n = model.num_layers
    layers = {"agreement": ("layer_range", settings.layer_range, "--layer-range"),
              "faithfulness": ("faithfulness_layers", settings.faithfulness_layers, "--faithfulness-layers")}
    for kind, (name, chosen, option) in layers.items():
        if kind in kinds and chosen is not None and not all(0 <= int(layer) < n for layer in chosen):
            raise SelectionError(f"{name} {tuple(chosen)} (0-based; {option} counts from 1) reaches past this "
                                 f"model's {n} layers: choose layers 0..{n - 1} ({option} 1-{n}).")
    if {"faithfulness", "leaderboard"} & set(kinds):
        from ..evaluation.deletion_engine import replacements_for

        if settings.replacement not in replacements_for(model):
            raise SettingsError(f"replacement '{settings.replacement}' needs a token this model's tokenizer lacks; "
                                f"choose one of {', '.join(replacements_for(model))}.")
    if "head-importance" in kinds and settings.importance_values is not None:
        shape = np.shape(settings.importance_values)
        if shape != (model.num_layers, model.num_heads):
            raise SettingsError(f"The head importance given has shape {shape}; this model has {model.num_layers} "
                                f"layers x {model.num_heads} heads.")


def run_kinds(df: pd.DataFrame, what, settings: Settings) -> tuple[str, ...]:
    """The kinds a run of `what` computes on `df`: those named, the kinds they need (kinds.resolve_kinds), less
    head importance on an unlabelled dataset when only agreement's scaled rows would use it."""
    kinds = resolve_kinds(what, settings)
    if "label" not in df and "head-importance" in kinds and settings.importance_values is None:
        if "head-importance" in kind_names(what) or settings.faithfulness_scaled:
            raise DatasetError("Head importance needs a labelled dataset (a 'label' column).")
        kinds = tuple(k for k in kinds if k != "head-importance")  # agreement then has unscaled rows only
    return kinds


def documents_done(store: ResultStore | None, df: pd.DataFrame, what, settings: Settings) -> int:
    """How many documents of `store` (of its first `limit`) hold every unit a run of `what` makes: 0 when there is
    no store yet or a dataset-level unit it needs is missing."""
    if store is None:
        return 0
    kinds = run_kinds(df, what, settings)
    if any(KINDS[k].dataset_level and not store.has(k) for k in kinds):
        return 0
    per_doc = [set(store.doc_ids(k)) for k in kinds if not KINDS[k].dataset_level]
    return len(set.intersection(*per_doc)) if per_doc else 0


def clamped(model: LoadedModel, settings: Settings) -> Settings:
    """`settings` with max_tokens at most the model's (what a run and its manifest use)."""
    return replace(settings, max_tokens=min(whole_number(settings.max_tokens, "max_tokens", lo=3), model.max_tokens))


class _Timer:
    """Seconds of the documents a run computed, for the time left (found documents cost nothing)."""

    def __init__(self):
        self.seconds, self.documents = 0.0, 0

    def add(self, seconds: float) -> None:
        self.seconds += seconds
        self.documents += 1

    def left(self, remaining: int) -> str:
        """', about 3.5 min left' for `remaining` documents at the measured mean, or '' before any was measured."""
        if not self.documents or remaining <= 0:
            return ""
        return f", about {format_seconds(self.seconds / self.documents * remaining)} left"


def _dataset_unit(job: Job, writer: StoreWriter, kind: str, progress) -> bool:
    """Compute a dataset-level kind once: the first shard to get the lock does it, the others then find it."""
    if writer.holds(None, kind):
        return False
    with file_lock(writer.root / f".{kind}.lock"):
        if writer.holds(None, kind):
            return False
        return writer.commit(None, kind, KINDS[kind].compute(job, progress))


class _Log:
    """Append-only record of every unit this writer computed (log/<writer>.jsonl): seconds per unit for
    throughput figures, and the evidence that a resumed run recomputed nothing. Never written through a link."""

    def __init__(self, root: Path, writer: str):
        if is_link(root / LOG):
            raise StoreError(link_problem(root / LOG) + ".")
        (root / LOG).mkdir(exist_ok=True)
        self.path = root / LOG / f"{writer}.jsonl"

    def write(self, doc_id: str, kind: str, seconds: float) -> None:
        line = json.dumps({"doc_id": doc_id, "kind": kind, "seconds": round(seconds, 4), "pid": os.getpid()})
        with os.fdopen(open_own(self.path, append=True), "a") as f:  # created if missing, never through a link
            f.write(line + "\n")


_LOG_BYTES = 64 * METADATA_BYTES  # a writer's log: a line of some 80 bytes per unit, millions of units


def read_logs(root) -> pd.DataFrame:
    """Every writer's log lines (doc_id, kind, seconds, pid, writer); a log that is a link, too large or damaged
    is left out (it only times the units)."""
    frames = []
    folder = Path(root) / LOG
    for p in [] if is_link(folder) else sorted(folder.glob("*.jsonl")):
        try:
            text = read_file(p, str(p), _LOG_BYTES, ValueError, links=False).decode()
            lines = [json.loads(s) for s in text.splitlines() if s.strip()]
        except (OSError, ValueError):
            continue
        if lines:
            frames.append(pd.DataFrame(lines).assign(writer=p.stem))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["doc_id", "kind", "seconds",
                                                                                      "pid", "writer"])


def tqdm_bar(total: int, desc: str):
    """A tqdm bar on stderr with the time left, for the command line."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="doc", dynamic_ncols=True, file=sys.stderr)


def leaderboard_settings(
    methods: Sequence[str] | None = None,
    target: int | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ks: Sequence[float] = KS,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    replacement: str = "mask",
    max_removed: float = 1.0,
    flip_bound: int | None = None,
    rank_by: str = "signed",
    options: dict | None = None,
    unit: str = "token",
) -> Settings:
    """The precompute settings of the store kind 'leaderboard' for these leaderboard options (as
    leaderboard.document_leaderboard takes them). IG's options that
    change its numbers (n_steps, method, precision) become the settings' IG fields; its cache options change
    nothing and are left out; the other explainers' options become explainer_options. unit: what the deletion
    test removes (DeletionSettings.unit)."""
    methods = list(DEFAULT_METHODS if methods is None else methods)
    lb.check_methods(methods, rank_by, replacement, options)
    options = {m: dict(o) for m, o in (options or {}).items()}
    ig = check_options("ig", options.pop("ig", {}))  # IG's settings, its defaults filled in
    for method, chosen in options.items():  # every other explainer's option names and values, before any document
        check_options(method, chosen)
    others = tuple((m, k, v) for m, o in sorted(options.items()) for k, v in sorted(o.items()))
    # Settings checks every count and fraction as given (int() here would read 2.5 as 2 and fail on NaN)
    target = "predicted" if target is None else str(whole_number(target, "target (the class explained)", lo=0))
    return Settings(max_tokens=max_tokens, n_steps=ig["n_steps"], ig_method=ig["method"],
                    precision=ig["precision"], target=target,
                    ks=ks, seeds=seeds, replacement=replacement, max_removed=max_removed,
                    flip_bound=flip_bound, explainers=tuple(methods), rank_by=rank_by, explainer_options=others or None,
                    unit=unit)


__all__ = ["RunSummary", "Settings", "build_manifest", "check_settings", "clamped", "documents_done", "leaderboard_settings", "manifest_versions", "parse_shard",
           "precompute", "read_logs", "run_kinds", "shard_rows", "tqdm_bar"]
