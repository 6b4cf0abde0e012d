"""Result stores on this machine: the app's local stores under <cache>/stores (where one lives, a run into it,
pruning old ones) and finding a precomputed store that serves a view."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pandas as pd

from .. import _disk
from .._disk import digest
from ..errors import LongvizError
from ..model.loading import LoadedModel, dataset_fingerprint
from ..progress import Progress
from .folders import deletable_stores
from .kinds import ALL_KINDS, KINDS, Settings, resolve_kinds
from .run import RunSummary, clamped, precompute, read_logs
from .store import FORMAT, ResultStore

def local_store_dir(model: LoadedModel, df: pd.DataFrame, settings: Settings = Settings(), cache_dir=None) -> Path:
    """Where in-process runs (the app, the Python API) keep the store for this model, dataset and settings: a
    folder under the cache root named by the model and dataset fingerprints and every kind's manifest settings
    (so settings that give the same numbers share one store, however they were written), and by the store format
    (a store of an earlier format is refused, so a new format starts a new folder)."""
    settings = clamped(model, settings)
    key = digest([model.fingerprint, dataset_fingerprint(df), settings.max_tokens,
                  {k: _key_settings(k, settings) for k in ALL_KINDS}, FORMAT], digest_size=10)
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
                progress: Progress | None = None, cache_dir=None, *, limit: int | None = None) -> ResultStore:
    """The in-process path (the app's "compute for the dataset" buttons, the Python API): the same precompute,
    for the first `limit` documents (all when None), into the store at local_store_dir, returned opened on those
    documents. Resumable and reused across sessions: a later call computes only what is missing, and a call while
    another session or process writes the store waits for it, then reads what it wrote. The run reuses
    the per-document disk caches of IG, head importance and the flip scans (kinds.Job)."""
    return local_run(model, df, what, settings, progress, cache_dir, limit)[0]


def local_run(model, df, what, settings, progress, cache_dir, limit=None) -> tuple[ResultStore, RunSummary]:
    """local_store's run, with the run's summary (what it computed and what it found done)."""
    out = local_store_dir(model, df, settings, cache_dir)
    summary = precompute(model, df, out, what, settings, limit=limit, progress=progress, use_cache=True,
                         cache_dir=cache_dir, wait=True)
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
