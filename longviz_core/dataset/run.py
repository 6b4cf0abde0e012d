"""Dataset-scale precompute: every document's attention, attribution, agreement and faithfulness results (the
kinds of dataset.kinds), written into a ResultStore (dataset.store) one atomic unit at a time, resumable and
shardable (dataset.ray runs the shards on a cluster).

The app's dataset-wide views run the very same kinds (into a store of their own for small datasets, see
`local_store`) and read the results back through the same aggregations (dataset.aggregate), so the numbers
have one code path whether they were precomputed on a cluster or computed in the app.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from .._disk import cache_folder, digest, file_lock, package_versions
from .._version import __version__
from ..errors import LongvizError
from ..model.loading import LoadedModel, dataset_fingerprint
from ..progress import Progress, eta_text, report
from .kinds import KINDS, Doc, Job, Settings, kind_names, resolve_kinds
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
    stop = n_documents if limit is None else min(n_documents, int(limit))
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
) -> RunSummary:
    """Compute the kinds `what` (dataset.kinds) for the rows of `shard` (see shard_rows) into the store at `out`.

    Resumable: units already on disk are skipped. Refuses (ManifestMismatchError) to add to a store made
    with another model, dataset or settings. `show_bar` draws a tqdm bar with ETA (the CLI); `progress`
    gets (fraction, message) for the app."""
    if "text" not in df:
        raise ValueError("the dataset needs a 'text' column (load it with load_dataset)")
    kinds = resolve_kinds(what)
    if "label" not in df and "head-importance" in kinds:
        if "head-importance" in kind_names(what):
            raise ValueError("head importance needs a labelled dataset (a 'label' column)")
        kinds = tuple(k for k in kinds if k != "head-importance")  # agreement then has unscaled rows only
    settings = replace(settings, max_tokens=min(int(settings.max_tokens), model.max_tokens))
    out = Path(out)
    open_manifest(out, build_manifest(model, df, settings, kinds, model_source, dataset_source),
                  allow_version_change)
    i, n = shard
    rows = shard_rows(len(df), shard, limit)
    started = time.monotonic()
    computed = {k: 0 for k in kinds}
    skipped = {k: 0 for k in kinds}
    writer_name = f"shard-{i}-of-{n}"
    with StoreWriter(out, writer_name) as writer:
        job = Job(model, df, settings, out)
        for k in (k for k in kinds if KINDS[k].dataset_level):
            if _dataset_unit(job, writer, k, progress):
                computed[k] += 1
            else:
                skipped[k] += 1
        doc_kinds = [k for k in kinds if not KINDS[k].dataset_level]
        labels = df["label"].to_numpy() if "label" in df else None
        bar = tqdm_bar(len(rows), f"{writer_name}: {','.join(doc_kinds)}") if show_bar else None
        log = _Log(out, writer_name)
        try:
            for done, row in enumerate(rows):
                doc = Doc(row, df["text"].iloc[row], int(labels[row]) if labels is not None else None, job)
                for k in doc_kinds:
                    if writer.exists(doc.doc_id, k):
                        if not writer.indexed(doc.doc_id, k):  # its writer died between rename and index
                            writer.index_from_files(doc.doc_id, k)
                        skipped[k] += 1
                        continue
                    t0 = time.monotonic()
                    record = KINDS[k].compute(job, doc)
                    if writer.commit(doc.doc_id, k, record):
                        computed[k] += 1
                        log.write(doc.doc_id, k, time.monotonic() - t0)
                if bar is not None:
                    bar.update(1)
                report(progress, (done + 1) / max(len(rows), 1),
                       f"Document {done + 1}/{len(rows)}{eta_text(started, done + 1, len(rows))}")
        finally:
            if bar is not None:
                bar.close()
    return RunSummary(out, kinds, shard, len(rows), computed, skipped, time.monotonic() - started)


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


# ======================================================================================= in-app path
def local_store_dir(model: LoadedModel, df: pd.DataFrame, settings: Settings, cache_dir=None) -> Path:
    """Where the app keeps the store it computes itself for a small dataset (under the cache root)."""
    key = digest([model.fingerprint, dataset_fingerprint(df), asdict(settings)], digest_size=10)
    return cache_folder("stores", cache_dir) / key


def local_store(model: LoadedModel, df: pd.DataFrame, what, settings: Settings = Settings(),
                progress: Progress | None = None, cache_dir=None) -> ResultStore:
    """The app's path for datasets small enough to compute in a session: the same precompute, into a store
    in the cache directory (resumable, reused across sessions), returned opened."""
    out = local_store_dir(model, df, settings, cache_dir)
    precompute(model, df, out, what, settings, progress=progress)
    return ResultStore(out)


def find_store(root, model_fingerprint: str, dataset_fingerprint: str, max_tokens: int | None = None) -> ResultStore | None:
    """The store at `root`, or in one of its sub-directories, made for this model and dataset (and
    max_tokens, when given); None when there is none. Unreadable candidates are skipped."""
    root = Path(root)
    candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []
    for path in candidates:
        if not (path / "manifest.json").is_file():
            continue
        try:
            store = ResultStore(path)
        except LongvizError:
            continue
        if store.matches(model_fingerprint, dataset_fingerprint, max_tokens):
            return store
        store.close()
    return None


__all__ = ["RunSummary", "Settings", "build_manifest", "find_store", "local_store", "local_store_dir",
           "manifest_versions", "parse_shard", "precompute", "read_logs", "shard_rows", "tqdm_bar"]
