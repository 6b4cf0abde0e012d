"""Command line: `python -m longviz_core precompute ...`, `python -m longviz_core store-info DIR` and
`python -m longviz_core leaderboard ...` (the explainer leaderboard, longviz_core/dataset/leaderboard.py).

See docs/dataset-scale.md for the workflow (single machine, shards, Ray) and the store's layout."""
from __future__ import annotations

import argparse
import json
import sys

from .errors import LongvizError


def _parser() -> argparse.ArgumentParser:
    from .dataset.kinds import ALL_KINDS, Settings

    d = Settings()
    p = argparse.ArgumentParser(prog="python -m longviz_core", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    pre = sub.add_parser("precompute", help="compute dataset-wide results into a store (resumable)")
    pre.add_argument("--model", required=True, help="'demo', a checkpoint directory or a Hub id")
    pre.add_argument("--dataset", required=True, help="'demo' or a CSV / Parquet / JSONL file")
    pre.add_argument("--text-column", default=None)
    pre.add_argument("--label-column", default=None)
    pre.add_argument("--what", default="attention",
                     help=f"comma-separated kinds among {','.join(ALL_KINDS)} (dependencies are added)")
    pre.add_argument("--out", required=True, help="the store directory (created; re-runs resume)")
    pre.add_argument("--max-tokens", type=int, default=d.max_tokens)
    pre.add_argument("--n-steps", type=int, default=d.n_steps, help="Integrated Gradients steps")
    pre.add_argument("--ig-method", default=d.ig_method)
    pre.add_argument("--target", default=d.target,
                     help="class IG explains: 'positive' (class 1, as the paper), 'predicted' or a class index")
    pre.add_argument("--precision", default=d.precision, choices=("fp32", "bf16", "fp16"))
    pre.add_argument("--grid", type=int, default=d.grid, help="cells per axis of the pooled head maps")
    pre.add_argument("--importance-docs", type=int, default=None,
                     help="head importance on the first N labelled documents (default: 32)")
    pre.add_argument("--importance-method", default=d.importance_method, choices=("t3vis", "michel"),
                     help="head importance: 't3vis' (Taylor, as T3-Vis and the paper) or 'michel' (gate gradient)")
    pre.add_argument("--limit", type=int, default=None, help="only the first N documents of the dataset")
    pre.add_argument("--shard", default="0/1", help="i/N: compute rows r with r %% N == i")
    pre.add_argument("--ray", action="store_true", help="run --workers shards as Ray tasks (RAY_ADDRESS or local)")
    pre.add_argument("--workers", type=int, default=None, help="shards on Ray (default: the cluster's GPUs, or 1)")
    pre.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    pre.add_argument("--threads", type=int, default=None, help="torch CPU threads of this process")
    pre.add_argument("--allow-version-change", action="store_true",
                     help="add to a store made with other versions of torch/transformers/captum/numpy")

    info = sub.add_parser("store-info", help="what a store holds (and, with --verify, whether it is intact)")
    info.add_argument("path")
    info.add_argument("--verify", action="store_true", help="check every file's checksum")

    from .dataset.leaderboard import add_arguments

    add_arguments(sub.add_parser("leaderboard", help="score every explainer by deletion on a dataset's documents"))
    return p


def _precompute(a) -> int:
    from .dataset.kinds import Settings
    from .dataset.ray import run_on_ray
    from .dataset.run import parse_shard, precompute

    settings = Settings(max_tokens=a.max_tokens, grid=a.grid, n_steps=a.n_steps, ig_method=a.ig_method,
                        target=a.target, precision=a.precision, importance_docs=a.importance_docs,
                        importance_method=a.importance_method)
    dataset_options = {"text_column": a.text_column, "label_column": a.label_column}
    if a.ray:
        summaries = run_on_ray(a.model, a.dataset, a.out, a.what, settings, a.workers, a.limit, dataset_options,
                               a.device, a.allow_version_change, show_bar=True)
    else:
        import torch

        from .model.loading import load_dataset, load_model

        if a.threads:
            torch.set_num_threads(a.threads)
        shard = parse_shard(a.shard)
        model = load_model(a.model, device=a.device)
        df = load_dataset(a.dataset, id2label=model.id2label, **dataset_options)
        summaries = [precompute(model, df, a.out, a.what, settings, shard, a.limit, show_bar=True,
                                model_source=a.model, dataset_source=a.dataset,
                                allow_version_change=a.allow_version_change)]
    for s in summaries:
        print(f"shard {s.shard[0]}/{s.shard[1]}: {s.documents} documents, computed {s.computed}, "
              f"already done {s.skipped}, {s.seconds:.1f} s", file=sys.stderr)
    return 0


def _store_info(a) -> int:
    from .dataset.store import ResultStore

    store = ResultStore(a.path)
    m = store.manifest
    kinds = {k: store.count(k) if k != "head-importance" else int(store.has(k)) for k in m.get("kinds", {})}
    print(json.dumps({"model": m["model"], "dataset": m["dataset"], "max_tokens": m["max_tokens"],
                      "settings": m.get("kinds"), "computed": kinds, "versions": m.get("versions")}, indent=2))
    if a.verify:
        problems = store.verify()
        for p in problems:
            print(p, file=sys.stderr)
        print(f"verify: {len(problems)} problem(s)", file=sys.stderr)
        return 1 if problems else 0
    return 0


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    try:
        from .dataset.leaderboard import run_cli

        return {"precompute": _precompute, "store-info": _store_info, "leaderboard": run_cli}[a.command](a)
    except (LongvizError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
