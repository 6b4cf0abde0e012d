"""Dataset-scale precompute: every document's attention, attribution, agreement and faithfulness results,
written into a ResultStore (store.py) one atomic unit at a time, resumable, shardable and runnable on Ray.

Each *kind* of result is a small function of one document (or, for head importance, of the dataset) that
returns a store.Record; the app's dataset-wide views run the very same functions (into a store of their
own for small datasets, see `local_store`) and read the results back through the same aggregations, so
the numbers have one code path whether they were precomputed on a cluster or computed in the app.

Kinds and what they store per document:
    attention        received (layers, heads, n) float32: attention each token receives, per head;
                     pooled (layers, heads, g, g) float32: the head maps on relative positions (dataset grid);
                     input_ids (n,); table `document` (row, label, predicted, prob_<class>, n_tokens, ...)
    attribution      scores (n,) float64 Integrated Gradients, L2-normalised (what every view uses), raw (n,) the
                     per-token sums before normalising; tables `summary` (target, total, delta, F(x), F(x'),
                     converged, weak) and `by_token` (attribution.document_token_sums)
    head-importance  (dataset level) importance (layers, heads) by `importance_method` (default T3-Vis's
                     Taylor scores, see views/importance.py), normalised as that method does, and raw
    agreement        tables `rows` (Tables 1-2), `heads` (every head's agreement with |IG|), `sets` (top-5 % sets)
    faithfulness     table `rows`: AOPC / LOdds at each k and the first decision flip (exact scan) per ranking;
                     the random row: means and sds over its seeds
A kind whose module is not in this installation is reported by name instead of failing half-way.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .errors import LongvizError, StoreError
from .loading import LoadedModel, dataset_fingerprint
from .store import Record, ResultStore, StoreWriter, _file_lock, doc_id_of, load_unit, open_manifest
from .types import Progress, report

ALL_KINDS = ("attention", "attribution", "head-importance", "agreement", "faithfulness")  # dependency order
_DEFAULT_PACKAGES = ("torch", "transformers", "captum", "numpy", "pandas", "pyarrow", "scipy", "rbo", "nltk")


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers (recorded per kind in the manifest)."""

    max_tokens: int = 2048
    grid: int = 64  # cells per axis of the pooled (dataset-wide) head maps
    n_steps: int = 50  # Integrated Gradients steps
    ig_method: str = "gausslegendre"
    # Class IG explains: "predicted" (as the agreement and faithfulness views do), "positive" (class 1, as the
    # paper's attribution figures), or a class index. |IG|, which agreement and faithfulness use, is the same
    # for either class of a binary classifier.
    target: str = "predicted"
    precision: str = "fp32"
    importance_docs: int | None = None  # labelled documents (first rows) for head importance; None = module default
    importance_method: str = "t3vis"  # head importance: "t3vis" (Taylor, T3-Vis) or "michel" (gate gradient)

    def __post_init__(self):
        if int(self.max_tokens) < 3:
            raise ValueError(f"max_tokens must be >= 3, got {self.max_tokens}")
        if int(self.n_steps) < 2:
            raise ValueError(f"n_steps must be >= 2 (captum's minimum), got {self.n_steps}")
        if not (self.target in ("positive", "predicted") or str(self.target).isdigit()):
            raise ValueError(f"target must be 'positive', 'predicted' or a class index, got {self.target!r}")
        if self.importance_docs is not None and int(self.importance_docs) < 1:
            raise ValueError(f"importance_docs must be >= 1, got {self.importance_docs}")
        if self.importance_method not in ("t3vis", "michel"):
            raise ValueError(f"importance_method must be 't3vis' or 'michel', got {self.importance_method!r}")


@dataclass
class _Doc:
    """One document of the run; its analysis (one forward) is made at most once, when a kind needs it."""

    row: int
    text: str
    label: int | None
    job: "_Job"
    _analysis: object = None

    @property
    def doc_id(self) -> str:
        return doc_id_of(self.row)

    @property
    def analysis(self):
        if self._analysis is None:
            from .analysis import analyze

            self._analysis = analyze(self.job.model, self.text, self.job.settings.max_tokens)
        return self._analysis

    def load(self, kind: str) -> Record:
        """A dependency's stored unit (committed earlier in this run or by an earlier run)."""
        return load_unit(self.job.root, self.doc_id, kind)


@dataclass
class _Job:
    model: LoadedModel
    df: pd.DataFrame
    settings: Settings
    root: Path  # the store (units are read from their files: a writer never opens other shards' indexes)


@dataclass(frozen=True)
class Kind:
    name: str
    modules: tuple  # modules of longviz_core this kind needs (an older installation may lack one)
    needs: tuple  # kinds that must be stored first
    settings: Callable[[Settings], dict]  # what the manifest records for this kind
    compute: Callable  # (job, doc) -> Record; dataset level: (job, progress) -> Record
    dataset_level: bool = False


# ============================================================================================ the kinds
def _attention(job: _Job, doc: _Doc) -> Record:
    from .views.pooling import pool_dataset

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
        tables={"document": table},
    )


def _target(job: _Job, analysis) -> int:
    t = job.settings.target
    if t == "predicted":
        return int(analysis.predicted)
    if t == "positive":
        return 1 if job.model.num_labels > 1 else 0
    if int(t) >= job.model.num_labels:
        raise ValueError(f"target class {t} does not exist (the model has {job.model.num_labels} classes)")
    return int(t)


def _attribution(job: _Job, doc: _Doc) -> Record:
    from .attribution import ConvergenceWarning, document_token_sums, integrated_gradients

    a = doc.analysis
    s = job.settings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded in the summary table instead
        attr = integrated_gradients(job.model, a, _target(job, a), s.n_steps, s.ig_method, precision=s.precision,
                                    use_cache=False)
    by_token = document_token_sums(a.tokens, attr.scores, job.model.tokenizer.all_special_tokens)
    summary = pd.DataFrame([{"target": attr.target, "n_steps": attr.n_steps, "total": attr.total, "delta": attr.delta,
                             "prob_input": attr.prob_input, "prob_baseline": attr.prob_baseline,
                             "converged": bool(attr.converged), "weak": attr.weak_explanation is not None}])
    return Record(arrays={"scores": attr.scores, "raw": attr.raw}, tables={"summary": summary, "by_token": by_token},
                  scalars={"target": attr.target, "delta": attr.delta})


def _score_scale() -> str:
    from .attribution import SCORE_SCALE

    return SCORE_SCALE


def _head_importance(job: _Job, progress: Progress | None) -> Record:
    from .views.importance import normalise_importance, raw_head_importance

    cfg = _importance_settings(job.settings)
    raw = raw_head_importance(job.model, job.df, job.settings.max_tokens, cfg["examples"], progress,
                              method=cfg["importance_method"])
    return Record(arrays={"raw": raw, "importance": normalise_importance(raw, cfg["normalise"])})


def _importance_settings(s: Settings) -> dict:
    from .views.importance import DEFAULT_EXAMPLES, DEFAULT_NORMALISATION

    method = s.importance_method
    return {"examples": s.importance_docs or DEFAULT_EXAMPLES, "importance_method": method,
            "normalise": DEFAULT_NORMALISATION[method]}


def _agreement(job: _Job, doc: _Doc) -> Record:
    from .agreement import MASK_KINDS, document_numbers, mask_for

    cfg = _agreement_settings(job.settings)
    a = doc.analysis
    scores = doc.load("attribution").arrays["scores"]
    try:
        importance = load_unit(job.root, None, "head-importance").arrays["importance"]
    except StoreError:  # an unlabelled dataset has no head importance: unscaled rows only
        importance = None
    numbers = document_numbers(a, scores, importance, mask_for(a.tokens, MASK_KINDS),
                                None, cfg["p"], cfg["top"])
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
    return Record(tables={"rows": pd.DataFrame(numbers["table"]), "heads": heads_df, "sets": sets_df})


def _agreement_settings(s: Settings) -> dict:
    from .agreement import MASK_KINDS
    from .similarity import DEFAULT_P, DEFAULT_TOP

    return {"p": DEFAULT_P, "top": DEFAULT_TOP, "mask": list(MASK_KINDS), "layer_range": None}


def _faithfulness(job: _Job, doc: _Doc) -> Record:
    from .faithfulness import faithfulness

    cfg = _faithfulness_settings(job.settings)
    a = doc.analysis
    result = faithfulness(job.model, a, doc.load("attribution").arrays["scores"], rankings=cfg["rankings"],
                          ks=cfg["ks"], replacement=cfg["replacement"], seeds=cfg["seeds"],
                          max_removed=cfg["max_removed"])
    rows = result.table()
    rows.insert(0, "p_original", result.p_original)
    rows.insert(0, "n", result.n)
    rows.insert(0, "predicted", result.predicted)
    return Record(tables={"rows": rows})


def _faithfulness_settings(s: Settings) -> dict:
    from .faithfulness import DEFAULT_SEEDS, KS, RANKINGS

    return {"rankings": list(RANKINGS), "ks": list(KS), "replacement": "mask", "flip": "exact scan",
            "max_removed": 1.0, "seeds": list(DEFAULT_SEEDS), "attention_layers": None, "scaled": False}


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("attention", ("analysis", "views.pooling"), (),
             lambda s: {"grid": s.grid, "pooling": "relative"}, _attention),
        Kind("attribution", ("attribution", "views.masking", "figures.text"), ("attention",),
             lambda s: {"n_steps": s.n_steps, "method": s.ig_method, "target": str(s.target),
                        "precision": s.precision, "scores": _score_scale()}, _attribution),
        Kind("head-importance", ("views.importance",), (), _importance_settings, _head_importance,
             dataset_level=True),
        Kind("agreement", ("agreement", "similarity"), ("attention", "attribution", "head-importance"),
             _agreement_settings, _agreement),
        Kind("faithfulness", ("faithfulness",), ("attention", "attribution"), _faithfulness_settings,
             _faithfulness),
    )
}


def available_kinds() -> dict[str, str | None]:
    """{kind: None if it can run here, else why not}."""
    out = {}
    for name, kind in KINDS.items():
        missing = [m for m in kind.modules if importlib.util.find_spec(f"longviz_core.{m}") is None]
        out[name] = f"needs longviz_core.{missing[0]}, which this installation does not have" if missing else None
    return out


def _names(what) -> list[str]:
    return [w.strip() for w in (what.split(",") if isinstance(what, str) else what) if w and w.strip()]


def resolve_kinds(what) -> tuple[str, ...]:
    """Validated kinds plus the kinds they depend on, in dependency order."""
    names = _names(what)
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
    missing = {k: why for k, why in available_kinds().items() if k in wanted and why}
    if missing:
        raise StoreError("Cannot compute " + "; ".join(f"'{k}': {why}" for k, why in missing.items()) + ".")
    return tuple(k for k in ALL_KINDS if k in wanted)


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
        "versions": package_versions(),
    }


def package_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import longviz_core

    out = {"python": platform.python_version(), "longviz_core": getattr(longviz_core, "__version__", "dev")}
    for p in _DEFAULT_PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


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
    """Compute the kinds `what` for the rows of `shard` (see shard_rows) into the store at `out`.

    Resumable: units already on disk are skipped. Refuses (ManifestMismatchError) to add to a store made
    with another model, dataset or settings. `show_bar` draws a tqdm bar with ETA (the CLI); `progress`
    gets (fraction, message) for the app."""
    if "text" not in df:
        raise ValueError("the dataset needs a 'text' column (load it with load_dataset)")
    kinds = resolve_kinds(what)
    if "label" not in df and "head-importance" in kinds:
        if "head-importance" in _names(what):
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
        job = _Job(model, df, settings, out)
        for k in (k for k in kinds if KINDS[k].dataset_level):
            if _dataset_unit(job, writer, k, progress):
                computed[k] += 1
            else:
                skipped[k] += 1
        doc_kinds = [k for k in kinds if not KINDS[k].dataset_level]
        labels = df["label"].to_numpy() if "label" in df else None
        bar = _bar(len(rows), f"{writer_name}: {','.join(doc_kinds)}") if show_bar else None
        log = _Log(out, writer_name)
        try:
            for done, row in enumerate(rows):
                doc = _Doc(row, df["text"].iloc[row], int(labels[row]) if labels is not None else None, job)
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
                       f"Document {done + 1}/{len(rows)}{_eta(started, done + 1, len(rows))}")
        finally:
            if bar is not None:
                bar.close()
    return RunSummary(out, kinds, shard, len(rows), computed, skipped, time.monotonic() - started)


def _dataset_unit(job: _Job, writer: StoreWriter, kind: str, progress) -> bool:
    """Compute a dataset-level kind once: the first shard to get the lock does it, the others then find it."""
    if writer.exists(None, kind):
        return False
    with _file_lock(writer.root / f".{kind}.lock"):
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


def _bar(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="doc", dynamic_ncols=True, file=sys.stderr)


def _eta(started: float, done: int, total: int) -> str:
    if done == 0 or done >= total:
        return ""
    left = (time.monotonic() - started) / done * (total - done)
    return f", about {left / 60:.1f} min left" if left >= 60 else f", about {left:.0f} s left"


# ======================================================================================= Ray
def run_on_ray(
    model_source: str,
    dataset_source: str,
    out,
    what="attention",
    settings: Settings = Settings(),
    workers: int | None = None,
    limit: int | None = None,
    dataset_options: dict | None = None,
    device: str | None = None,
    allow_version_change: bool = False,
    show_bar: bool = False,
    progress: Progress | None = None,
) -> list[RunSummary]:
    """Run the precompute as `workers` shards on Ray: one task per shard (num_gpus=1 when the cluster has
    GPUs, else an equal share of its CPUs). Ray does the scheduling, placement and retries of dead workers;
    the shards write into one store (`out` must be a directory every node can reach, and longviz_core,
    the model and the dataset must be reachable by the same names on every node).

    Connects to the cluster named by RAY_ADDRESS, or to one already initialised in this process, or starts
    a local one. Dataset-level kinds (head importance) run first, in one task, so no shard waits on them."""
    import ray

    kinds = resolve_kinds(what)
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False)
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    workers = int(workers or max(gpus, 1))
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    options = {"num_gpus": 1, "num_cpus": 1} if gpus else {"num_cpus": max(1, cpus // workers)}
    task = ray.remote(max_retries=2, runtime_env=_ray_runtime_env(), **options)(_shard_task)
    args = dict(model=model_source, dataset=dataset_source, dataset_options=dataset_options or {}, out=str(out),
                settings=asdict(settings), limit=limit, device=device, allow_version_change=allow_version_change)
    ray.get(task.remote(dict(args, what=list(kinds), shard=(0, 1), limit=0)))  # manifest + dataset-level units
    pending = [task.remote(dict(args, what=list(kinds), shard=(i, workers))) for i in range(workers)]
    doc_kinds = [k for k in kinds if not KINDS[k].dataset_level]
    n_docs = json.loads((Path(out) / "manifest.json").read_text())["dataset"]["n_documents"]
    total = len(shard_rows(n_docs, (0, 1), limit)) * len(doc_kinds)
    bar = _bar(total, f"ray x{workers}: {','.join(doc_kinds)}") if show_bar else None
    results = []
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=2.0)
            results += ray.get(ready)
            done = _units_done(Path(out), doc_kinds, limit)
            if bar is not None:
                bar.update(done - bar.n)
            report(progress, done / max(total, 1), f"{done}/{total} units on {workers} Ray workers")
    finally:
        if bar is not None:
            bar.close()
    return [RunSummary(Path(r["out"]), tuple(r["kinds"]), tuple(r["shard"]), r["documents"], r["computed"],
                       r["skipped"], r["seconds"]) for r in results]


def _shard_task(args: dict) -> dict:
    """One Ray task: load the model and dataset on the worker and run one shard."""
    import torch

    from .loading import load_dataset, load_model

    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # outside Ray (called directly)
        cpus = None
    if cpus:
        torch.set_num_threads(max(1, int(cpus)))
    model = load_model(args["model"], device=args["device"])
    df = load_dataset(args["dataset"], id2label=model.id2label, **args["dataset_options"])
    s = precompute(model, df, args["out"], args["what"], Settings(**args["settings"]), tuple(args["shard"]),
                   args["limit"], model_source=args["model"], dataset_source=args["dataset"],
                   allow_version_change=args["allow_version_change"])
    return {"out": str(s.out), "kinds": list(s.kinds), "shard": list(s.shard), "documents": s.documents,
            "computed": s.computed, "skipped": s.skipped, "seconds": s.seconds}


def _ray_runtime_env() -> dict:
    """Workers see this checkout's longviz_core and the cache/offline settings of the driver."""
    here = str(Path(__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    for var in ("LONGVIZ_CACHE_DIR", "HF_HUB_OFFLINE", "HF_HOME"):
        if os.environ.get(var):
            env[var] = os.environ[var]
    return {"env_vars": env}


def _units_done(root: Path, kinds, limit) -> int:
    from .store import _scan

    return sum(1 for d, k in _scan(root) if k in kinds and (limit is None or int(d) < int(limit)))


# ======================================================================================= in-app path
def local_store_dir(model: LoadedModel, df: pd.DataFrame, settings: Settings, cache_dir=None) -> Path:
    """Where the app keeps the store it computes itself for a small dataset (under the cache root)."""
    from .demo import cache_root

    key = hashlib.blake2b(json.dumps([model.fingerprint, dataset_fingerprint(df), asdict(settings)],
                                     sort_keys=True, default=str).encode(), digest_size=10).hexdigest()
    return cache_root(cache_dir) / "stores" / key


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


__all__ = ["ALL_KINDS", "KINDS", "Kind", "RunSummary", "Settings", "available_kinds", "build_manifest",
           "find_store", "local_store", "local_store_dir", "package_versions", "parse_shard", "precompute",
           "read_logs", "resolve_kinds", "run_on_ray", "shard_rows"]
