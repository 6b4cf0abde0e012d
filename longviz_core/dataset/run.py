"""Dataset-scale precompute: every document's attention, attribution, agreement, faithfulness and explainer
leaderboard results (the kinds of dataset.kinds), written into a ResultStore (dataset.store) one atomic unit at a time, resumable and
shardable (dataset.ray runs the shards on a cluster).

The command line, Ray, the app's "compute for the dataset" buttons and the Python API's dataset functions all run
this one precompute: in-process runs go into a local store under the cache root (`local_store`), and every
dataset-wide number is read back through the store's aggregation methods.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .. import _disk
from .._disk import digest, file_lock, package_versions
from .._version import __version__
from ..attribution.explainers import EXPLAINERS
from ..errors import DatasetError, InputTextError, LongvizError, whole_number
from ..model.encoding import DEFAULT_MAX_TOKENS
from ..model.loading import LoadedModel, dataset_fingerprint
from ..progress import Progress, format_seconds, report
from ..views.agreement import MASK_KINDS
from ..views.faithfulness import DEFAULT_SEEDS, KS, RANKINGS, check_settings
from ..views.similarity import DEFAULT_P, DEFAULT_TOP
from . import leaderboard as lb
from .folders import check_store_target, deletable_stores
from .aggregate import DatasetAgreement, DatasetAttribution, DatasetFaithfulness
from .kinds import ALL_KINDS, KINDS, Doc, Job, Settings, kind_names, resolve_kinds
from .store import ResultStore, StoreWriter, open_manifest

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
    i, n = (int(v) for v in shard)
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard must be (i, N) with 0 <= i < N, got {shard}")
    stop = n_documents if limit is None else min(n_documents, whole_number(limit, "limit (documents)", lo=0))
    return list(range(i, stop, n))


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
    on_wait=None,
) -> RunSummary:
    """Compute the kinds `what` (dataset.kinds) for the rows of `shard` (see shard_rows) into the store at `out`.

    Resumable: units already on disk are skipped. Refuses (ManifestMismatchError) to add to a store made
    with another model, dataset or settings. `show_bar` draws a tqdm bar with ETA (the CLI); `progress`
    gets (fraction, message) after every document: documents done / total and the time left, from the measured
    time of the documents this run computed (those found done cost nothing). An exception raised by `progress`
    (the app's Stop button, a closed tab) ends the run there; every committed unit stays.
    use_cache / cache_dir / on_wait: see kinds.Job (in-process runs)."""
    if "text" not in df:
        raise ValueError("the dataset needs a 'text' column (load it with load_dataset)")
    kinds = run_kinds(df, what, settings)
    settings = clamped(model, settings)
    shard_rows(len(df), shard, limit)  # its arguments checked before anything is written
    out = check_store_target(out)
    open_manifest(out, build_manifest(model, df, settings, kinds, model_source, dataset_source),
                  allow_version_change)
    i, n = shard
    rows = shard_rows(len(df), shard, limit)
    started = time.monotonic()
    computed = {k: 0 for k in kinds}
    skipped = {k: 0 for k in kinds}
    writer_name = f"shard-{i}-of-{n}"
    with StoreWriter(out, writer_name) as writer:
        job = Job(model, df, settings, out, use_cache=use_cache, cache_dir=cache_dir, on_wait=on_wait)
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
                    if writer.exists(doc.doc_id, k):
                        if not writer.indexed(doc.doc_id, k):  # its writer died between rename and index
                            writer.index_from_files(doc.doc_id, k)
                        skipped[k] += 1
                        continue
                    t0 = time.monotonic()
                    record = KINDS[k].compute(job, doc)
                    did = True
                    if writer.commit(doc.doc_id, k, record):
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
    if writer.exists(None, kind):
        return False
    with file_lock(writer.root / f".{kind}.lock"):
        if writer.exists(None, kind):
            return False
        return writer.commit(None, kind, KINDS[kind].compute(job, progress))


class _Log:
    """Append-only record of every unit this writer computed (log/<writer>.jsonl): seconds per unit for
    throughput figures, and the evidence that a resumed run recomputed nothing."""

    def __init__(self, root: Path, writer: str):
        (root / "log").mkdir(exist_ok=True)
        self.path = root / "log" / f"{writer}.jsonl"

    def write(self, doc_id: str, kind: str, seconds: float) -> None:
        line = json.dumps({"doc_id": doc_id, "kind": kind, "seconds": round(seconds, 4), "pid": os.getpid()})
        with open(self.path, "a") as f:
            f.write(line + "\n")


def read_logs(root) -> pd.DataFrame:
    """Every writer's log lines (doc_id, kind, seconds, pid, writer)."""
    frames = []
    for p in sorted((Path(root) / "log").glob("*.jsonl")):
        lines = [json.loads(s) for s in p.read_text().splitlines() if s.strip()]
        if lines:
            frames.append(pd.DataFrame(lines).assign(writer=p.stem))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["doc_id", "kind", "seconds",
                                                                                      "pid", "writer"])


def tqdm_bar(total: int, desc: str):
    """A tqdm bar on stderr with the time left, for the command line."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="doc", dynamic_ncols=True, file=sys.stderr)


# ================================================================================== in-process stores
def local_store_dir(model: LoadedModel, df: pd.DataFrame, settings: Settings = Settings(), cache_dir=None) -> Path:
    """Where in-process runs (the app, the Python API) keep the store for this model, dataset and settings: a
    folder under the cache root named by the model and dataset fingerprints and every kind's manifest settings
    (so settings that give the same numbers share one store, however they were written)."""
    settings = clamped(model, settings)
    key = digest([model.fingerprint, dataset_fingerprint(df), settings.max_tokens,
                  {k: _key_settings(k, settings) for k in ALL_KINDS}], digest_size=10)
    return _disk.cache_folder("stores", cache_dir) / key


def prune_local_stores(older_than_days: float, cache_dir=None, *, dry_run: bool = False,
                       now: float | None = None) -> list[Path]:
    """The in-process runs' local stores (local_store_dir's folder) not written for `older_than_days` days,
    deleted (only listed with `dry_run`); returns them. A store was last written when its newest file was (a read
    writes nothing). They are caches: a view computes again what it needs. A store being written has fresh files
    and is kept."""
    if not float(older_than_days) >= 0:
        raise ValueError(f"older_than_days must be >= 0, got {older_than_days}")
    root = _disk.cache_folder("stores", cache_dir)
    if not root.is_dir():
        return []
    cutoff = (time.time() if now is None else now) - float(older_than_days) * 86400
    stores, _others = deletable_stores(root)  # symlinks, files and folders that are not stores stay
    old = [p for p in stores if _last_written(p) < cutoff]
    if not dry_run:
        for store in old:
            shutil.rmtree(store)
    return old


def _last_written(folder: Path) -> float:
    """The newest modification time in `folder` (itself included); now when a file vanishes while looking (a
    writer is at work)."""
    try:
        return max([folder.lstat().st_mtime, *(p.lstat().st_mtime for p in folder.rglob("*"))])
    except FileNotFoundError:
        return time.time()


def _key_settings(kind: str, settings: Settings):
    """A kind's manifest settings for the local store's key, or why it rejects them: settings only another kind
    uses may be invalid for this one (faithfulness without random may have no seeds; the leaderboard's default
    explainers include random), and a run is refused only for the kinds it computes (build_manifest)."""
    try:
        return KINDS[kind].settings(settings)
    except ValueError as exc:
        return f"invalid: {exc}"


def local_store(model: LoadedModel, df: pd.DataFrame, what, settings: Settings = Settings(),
                progress: Progress | None = None, cache_dir=None, *, limit: int | None = None,
                on_wait=None) -> ResultStore:
    """The in-process path (the app's "compute for the dataset" buttons, the Python API): the same precompute,
    for the first `limit` documents (all when None), into the store at local_store_dir, returned opened on those
    documents. Resumable and reused across sessions: a later call computes only what is missing. The run reuses
    the per-document disk caches of IG, head importance and the flip scans (kinds.Job)."""
    return _local_run(model, df, what, settings, progress, cache_dir, on_wait, limit)[0]


def _local_run(model, df, what, settings, progress, cache_dir, on_wait, limit=None) -> tuple[ResultStore, RunSummary]:
    out = local_store_dir(model, df, settings, cache_dir)
    summary = precompute(model, df, out, what, settings, limit=limit, progress=progress, use_cache=True,
                         cache_dir=cache_dir, on_wait=on_wait)
    return ResultStore(out, limit), summary


def seconds_per_document(root, kinds) -> float | None:
    """The mean measured seconds of one document's units of `kinds` in the store at `root` (its logs), or None
    when none was computed there yet: what a page states before a run."""
    logs = read_logs(root)
    logs = logs[logs["kind"].isin(list(kinds))]
    if logs.empty:
        return None
    return float(logs.groupby("doc_id")["seconds"].sum().mean())


def serves_view(store: ResultStore, kind: str, settings: Settings, only=None) -> bool:
    """Whether `store` (one found at LONGVIZ_STORE_DIR, say) holds `kind` made with `settings` for a view that
    reads it: the kind's manifest settings (only the keys in `only`, when given: the heatmap grid and the token
    counts read different parts of attention's) and those of every kind its numbers rest on (ResultStore.serves),
    at the same max tokens. Attention's own settings (grid, counts) change no other kind's numbers; head importance
    is checked when the store holds it (an unlabelled dataset's store has none: agreement has unscaled rows)."""
    if store.max_tokens != int(settings.max_tokens):
        return False
    own = KINDS[kind].settings(settings)
    if not store.serves(kind, **({k: own[k] for k in only} if only is not None else own)):
        return False
    for dep in resolve_kinds(kind, settings):
        if dep == kind or dep == "attention":
            continue
        if dep == "head-importance" and not store.has(dep) and not settings.faithfulness_scaled:
            continue
        if not store.serves(dep, **KINDS[dep].settings(settings)):
            return False
    return True


def find_stores(root, model_fingerprint: str, dataset_fingerprint: str, max_tokens: int | None = None
                ) -> list[ResultStore]:
    """The stores at `root` and in its sub-directories made for this model and dataset (and max_tokens, when
    given), in name order. Unreadable candidates are skipped."""
    root = Path(root)
    candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []
    found = []
    for path in candidates:
        if not (path / "manifest.json").is_file():
            continue
        try:
            store = ResultStore(path)
        except LongvizError:
            continue
        if store.matches(model_fingerprint, dataset_fingerprint, max_tokens):
            found.append(store)
        else:
            store.close()
    return found


def find_store(root, model_fingerprint: str, dataset_fingerprint: str, max_tokens: int | None = None
               ) -> ResultStore | None:
    """The first of find_stores, or None when there is none."""
    found = find_stores(root, model_fingerprint, dataset_fingerprint, max_tokens)
    for store in found[1:]:
        store.close()
    return found[0] if found else None


# ======================================================================= the Python API's dataset functions
def _texts_frame(texts, labels=None) -> pd.DataFrame:
    """A dataset of `texts` (and integer `labels`, all or none) as precompute takes it."""
    texts = list(texts)
    if not texts:
        raise DatasetError("No documents: give at least one text.")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()), None)
    if bad is not None:
        raise InputTextError(f"Text {bad} is empty or not a string.")
    df = pd.DataFrame({"text": texts})
    labels = None if labels is None else list(labels)
    if labels is not None and any(v is not None for v in labels):
        if len(labels) != len(texts) or any(v is None for v in labels):
            raise DatasetError(f"Give one label per text or none ({len(labels)} labels for {len(texts)} texts).")
        df["label"] = np.asarray(labels, dtype=np.int64)
    return df


def dataset_attributions(
    model: LoadedModel,
    texts,
    target: int,
    n_steps: int = 50,
    method: str = "gausslegendre",
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    precision: str = "fp32",
    masked: bool = False,
    min_docs: int = 1,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetAttribution:
    """Dataset-wide attribution by token type (Fig 10e/f) over `texts`: the precompute's "attribution" kind (IG of
    class `target` with `n_steps` steps) into the local store for these texts and settings (local_store:
    resumable, and a later call with the same texts and settings computes nothing), then the store's aggregation
    (ResultStore.dataset_attributions): per type the mean over all documents of its summed normalised scores,
    the documents containing it, its occurrences and its mean per occurrence. masked: apply the paper's mask;
    min_docs: hide types found in fewer documents (the other types' means do not change)."""
    if not isinstance(target, (int, np.integer)) or not 0 <= int(target) < model.num_labels:
        raise ValueError(f"target must be a class index in [0, {model.num_labels - 1}], got {target!r}")
    if not isinstance(min_docs, (int, np.integer)) or min_docs < 1:
        raise ValueError(f"min_docs must be a positive integer, got {min_docs!r}")
    settings = Settings(max_tokens=max_tokens, n_steps=n_steps, ig_method=method, precision=precision,
                        target=str(int(target)))
    store, summary = _local_run(model, _texts_frame(texts), "attribution", settings, progress, cache_dir, on_wait)
    return replace(store.dataset_attributions(int(target), masked, min_docs),
                   from_cache=not any(summary.computed.values()))


def dataset_agreement(
    model: LoadedModel,
    texts,
    *,
    max_tokens: int,
    ig_steps: int = 50,
    importance=None,
    mask_kinds=MASK_KINDS,
    layer_range: tuple[int, int] | None = None,
    p: float = DEFAULT_P,
    top: float = DEFAULT_TOP,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetAgreement:
    """Tables 1-2, the top-set token counts (every configuration) and the per-head grids (HEAD_METRICS x
    MASK_MODES) over `texts`, mean +- std over documents: the precompute's "agreement" kind (IG of the predicted
    class with `ig_steps` steps, the mask rebuilt per document from `mask_kinds`, rows scaled by `importance`
    (layers, heads) when given) into the local store for these texts and settings (resumable; a later call with
    the same texts and settings computes nothing), then the store's aggregation (ResultStore.dataset_agreement).
    `from_cache` counts the documents found in the store."""
    settings = Settings(max_tokens=max_tokens, n_steps=ig_steps, target="predicted", importance_values=importance,
                        rbo_p=p, top=top, mask_kinds=tuple(mask_kinds), layer_range=layer_range)
    store, summary = _local_run(model, _texts_frame(texts), "agreement", settings, progress, cache_dir, on_wait)
    return replace(store.dataset_agreement(), from_cache=summary.skipped["agreement"])


def dataset_faithfulness(
    model: LoadedModel,
    texts,
    labels=None,
    *,
    max_tokens: int,
    ig_steps: int = 50,
    layers=None,
    scale=None,
    rankings=RANKINGS,
    ks=KS,
    replacement: str = "mask",
    seeds=DEFAULT_SEEDS,
    max_removed: float = 1.0,
    batch_size: int | None = None,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetFaithfulness:
    """views.faithfulness.faithfulness on every text (IG of the predicted class with `ig_steps` steps; the attention
    ranking over `layers`, scaled by `scale` (layers, heads) when given), then per ranking the mean and sd over
    documents: the precompute's "faithfulness" kind into the local store for these texts and settings
    (resumable; a later call with the same texts and settings computes nothing), then the store's aggregation
    (ResultStore.dataset_faithfulness). `labels` go into the per-document rows. `batch_size` is checked but the
    run scores copies in the view's default batches (batching changes the cost, not the numbers); `from_cache`
    counts the documents found in the store."""
    check_settings(rankings, batch_size, seeds, max_removed)
    settings = Settings(max_tokens=max_tokens, n_steps=ig_steps, target="predicted", rankings=tuple(rankings),
                        ks=tuple(ks), replacement=replacement, seeds=tuple(seeds), max_removed=max_removed,
                        faithfulness_layers=None if layers is None else tuple(np.atleast_1d(layers)),
                        faithfulness_scaled=scale is not None, importance_values=scale)
    df = _texts_frame(texts, labels)
    store, summary = _local_run(model, df, "faithfulness", settings, progress, cache_dir, on_wait)
    return replace(store.dataset_faithfulness(), from_cache=summary.skipped["faithfulness"])


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
) -> Settings:
    """The precompute settings of the store kind 'leaderboard' for these leaderboard options (as
    leaderboard.document_leaderboard takes them). IG's options that
    change its numbers (n_steps, method, precision) become the settings' IG fields; its cache options change
    nothing and are left out; the other explainers' options become explainer_options."""
    methods = list(EXPLAINERS if methods is None else methods)
    lb.check_methods(methods, rank_by, replacement, options)
    options = {m: dict(o) for m, o in (options or {}).items()}
    ig = {**EXPLAINERS["ig"].options, **options.pop("ig", {})}
    unknown = sorted(set(ig) - set(EXPLAINERS["ig"].options))
    if unknown:
        raise lb.LeaderboardError(f"ig has no option(s) {unknown}; its options are {sorted(EXPLAINERS['ig'].options)}")
    others = tuple((m, k, v) for m, o in sorted(options.items()) for k, v in sorted(o.items()))
    return Settings(max_tokens=int(max_tokens), n_steps=int(ig["n_steps"]), ig_method=ig["method"],
                    precision=ig["precision"], target="predicted" if target is None else str(int(target)),
                    ks=tuple(ks), seeds=tuple(seeds), replacement=replacement, max_removed=float(max_removed),
                    flip_bound=flip_bound, explainers=tuple(methods), rank_by=rank_by, explainer_options=others or None)


def leaderboard_runs(
    model: LoadedModel,
    texts,
    methods: Sequence[str] | None = None,
    target: int | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ks: Sequence[float] = KS,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    replacement: str = "mask",
    max_removed: float = 1.0,
    rank_by: str = "signed",
    options: dict | None = None,
    batch_size: int | None = None,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> tuple[pd.DataFrame, int]:
    """leaderboard.document_leaderboard on every text (truncated to max_tokens), with a 'doc' column; (runs, documents found
    in the store). The precompute's "leaderboard" kind into the local store for these texts and settings
    (run.local_store: resumable, a later call with the same texts and settings computes nothing, progress after
    every document with the time left), then the store's aggregation (ResultStore.leaderboard_runs).
    `batch_size` is checked but the run scores copies in the deletion test's default batches (batching changes
    the cost, not the numbers)."""
    texts = list(texts)
    if not texts:
        raise lb.LeaderboardError("No documents to score.")
    if batch_size is not None and int(batch_size) < 1:
        raise lb.LeaderboardError(f"batch_size must be at least 1, got {batch_size}")
    settings = leaderboard_settings(methods, target, max_tokens=max_tokens, ks=ks, seeds=seeds,
                                    replacement=replacement, max_removed=max_removed, rank_by=rank_by,
                                    options=options)
    store, summary = _local_run(model, _texts_frame(texts), "leaderboard", settings, progress, cache_dir, on_wait)
    return store.leaderboard_runs(), summary.skipped["leaderboard"]


def leaderboard(model: LoadedModel, texts, methods: Sequence[str] | None = None, target: int | None = None, *,
                max_tokens: int = DEFAULT_MAX_TOKENS, **settings) -> pd.DataFrame:
    """The dataset leaderboard (leaderboard.summarise of leaderboard_runs): one row per explainer (method, aopc,
    lodds, first_flip, seconds, then the sds, flip rate, peak memory and every k), sorted by AOPC with the best
    marked; random's numbers are the mean ± sd over its seeds. Settings as leaderboard_runs."""
    runs, _ = leaderboard_runs(model, texts, methods, target, max_tokens=max_tokens, **settings)
    return lb.summarise(runs, settings.get("ks", KS))

__all__ = ["RunSummary", "Settings", "build_manifest", "clamped", "dataset_agreement", "dataset_attributions",
           "dataset_faithfulness", "documents_done", "find_store", "find_stores", "leaderboard", "leaderboard_runs",
           "leaderboard_settings", "local_store", "local_store_dir", "manifest_versions", "prune_local_stores", "parse_shard", "precompute", "read_logs", "run_kinds", "seconds_per_document",
           "serves_view", "shard_rows", "tqdm_bar"]
