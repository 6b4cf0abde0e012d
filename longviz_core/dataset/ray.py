"""The precompute on a Ray cluster: one task per shard, every shard writing into one store (dataset.run,
dataset.store)."""
from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from ..errors import whole_number
from ..progress import Progress, report
from .kinds import KINDS, Settings, resolve_kinds
from .folders import check_store_target
from .run import RunSummary, precompute, shard_rows, tqdm_bar
from .store import read_manifest, scan_units


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
    shard_rows(0, (0, 1), limit)  # the arguments checked before a cluster starts or anything is written
    if workers is not None:
        workers = whole_number(workers, "workers (shards run at once)", lo=1)
    check_store_target(out)
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False)
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    workers = workers or max(gpus, 1)
    options = {"num_gpus": 1, "num_cpus": 1} if gpus else {"num_cpus": max(1, cpus // workers)}
    task = ray.remote(max_retries=2, runtime_env=_ray_runtime_env(), **options)(_shard_task)
    args = dict(model=model_source, dataset=dataset_source, dataset_options=dataset_options or {}, out=str(out),
                settings=asdict(settings), limit=limit, device=device, allow_version_change=allow_version_change)
    ray.get(task.remote(dict(args, what=list(kinds), shard=(0, 1), limit=0)))  # manifest + dataset-level units
    pending = [task.remote(dict(args, what=list(kinds), shard=(i, workers))) for i in range(workers)]
    doc_kinds = [k for k in kinds if not KINDS[k].dataset_level]
    n_docs = read_manifest(out)["dataset"]["n_documents"]  # written by the first task
    total = len(shard_rows(n_docs, (0, 1), limit)) * len(doc_kinds)
    bar = tqdm_bar(total, f"ray x{workers}: {','.join(doc_kinds)}") if show_bar else None
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

    from ..model.loading import load_dataset, load_model

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
    here = str(Path(__file__).resolve().parents[2])  # the folder holding longviz_core/
    env = {"PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    for var in ("LONGVIZ_CACHE_DIR", "HF_HUB_OFFLINE", "HF_HOME"):
        if os.environ.get(var):
            env[var] = os.environ[var]
    return {"env_vars": env}


def _units_done(root: Path, kinds, limit) -> int:
    return sum(1 for d, k in scan_units(root) if k in kinds and (limit is None or int(d) < int(limit)))


__all__ = ["run_on_ray"]
