"""longviz: why did the long-document classifier decide that?

The `longviz` command (also `python -m longviz_core`): `longviz app` starts the Streamlit app, `longviz demo`
builds the offline demo, `longviz precompute` and `longviz store-info` compute and inspect dataset-wide results
(docs/dataset-scale.md: single machine, shards, Ray, the store's layout), `longviz prune-stores` deletes the app's
local stores no longer written to, `longviz leaderboard` scores every explainer by deletion on a dataset's
documents (the precompute's leaderboard kind, dataset/leaderboard.py)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .config import DEMO_MODELS
from .errors import LongvizError

# app.py and pages/ sit beside the package in a clone (and so in an editable install), not inside it.
CLONE_ROOT = Path(__file__).resolve().parent.parent


class _CommandList(argparse.HelpFormatter):
    """One line per command in `longviz --help`: argparse measures the command names without their extra
    indent, so the help of the longest name would wrap onto a line of its own."""

    def add_argument(self, action):
        super().add_argument(action)
        if action.help is not argparse.SUPPRESS and hasattr(action, "_get_subactions"):
            names = [len(self._format_action_invocation(s)) for s in action._get_subactions()]
            self._action_max_length = max(self._action_max_length,
                                          max(names, default=0) + self._current_indent + self._indent_increment)


def _count(lo: int = 1):
    """An argparse type: a whole number (ASCII digits) of at least `lo`; anything else is a usage error."""
    def parse(text: str) -> int:
        if not text.isascii() or not text.lstrip("-").isdigit() or int(text) < lo:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {lo}, got {text!r}")
        return int(text)

    parse.__name__ = "count"
    return parse


def _finite(text: str) -> float:
    """An argparse type: a finite number (NaN and infinity are usage errors, not settings)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not text.isascii() or value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    from .dataset.kinds import ALL_KINDS, Settings

    d = Settings()
    p = argparse.ArgumentParser(prog="longviz", description=__doc__.splitlines()[0], formatter_class=_CommandList)
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    app = sub.add_parser("app", help="start the app: streamlit run app.py, in a clone",
                         description="Runs `streamlit run app.py` with these arguments; app options follow `--`, "
                                     "e.g. `longviz app --server.port 8502 -- --config longviz.toml`.")
    app.add_argument("streamlit_args", nargs="*", metavar="ARG", help="passed to `streamlit run app.py`")

    demo = sub.add_parser("demo", help="build the offline demo if needed; show its accuracy")
    demo.add_argument("--model", default="demo", choices=DEMO_MODELS,
                      help="which demo: demo (Longformer, the default), demo-modernbert or demo-decoder (Qwen3)")
    demo.add_argument("--rebuild", action="store_true", help="build it again even if it exists")
    demo.add_argument("--cache-dir", default=None, help="default: $LONGVIZ_CACHE_DIR, else ~/.cache/longviz")

    pre = sub.add_parser("precompute", help="compute dataset-wide results into a store (resumable)")
    pre.add_argument("--model", required=True, help="'demo', a checkpoint directory or a Hub id")
    pre.add_argument("--dataset", required=True, help="'demo' or a CSV / Parquet / JSONL file")
    pre.add_argument("--text-column", default=None)
    pre.add_argument("--label-column", default=None)
    pre.add_argument("--what", default="attention",
                     help=f"comma-separated kinds among {','.join(ALL_KINDS)} (dependencies are added)")
    pre.add_argument("--out", required=True, help="the store directory (created; re-runs resume)")
    pre.add_argument("--max-tokens", type=_count(3), default=d.max_tokens)
    pre.add_argument("--n-steps", type=_count(), default=d.n_steps, help="Integrated Gradients steps")
    pre.add_argument("--ig-method", default=d.ig_method)
    pre.add_argument("--target", default=d.target,
                     help="class IG explains: 'positive' (class 1, as the paper), 'predicted' or a class index")
    pre.add_argument("--precision", default=d.precision, choices=("fp32", "bf16", "fp16"))
    pre.add_argument("--grid", type=_count(), default=d.grid, help="cells per axis of the pooled head maps")
    pre.add_argument("--importance-docs", type=_count(), default=None,
                     help="head importance on the first N labelled documents (default: 32)")
    pre.add_argument("--importance-method", default=d.importance_method, choices=("t3vis", "michel"),
                     help="head importance: 't3vis' (Taylor, as T3-Vis and the paper) or 'michel' (gate gradient)")
    pre.add_argument("--rbo-p", type=_finite, default=None, help="agreement: RBO persistence p (default 0.99)")
    pre.add_argument("--top", type=_finite, default=None, help="agreement: the top set's fraction (default 0.05)")
    pre.add_argument("--mask", default=None,
                     help="agreement: mask kinds among special,nonalnum,stopwords ('' for none; default all)")
    pre.add_argument("--layer-range", default=None,
                     help="agreement: an extra attention source, layers lo-hi (1-based, as the app shows them)")
    pre.add_argument("--replacement", default=d.replacement, choices=("mask", "pad", "baseline"),
                     help="faithfulness and leaderboard: what a removed token becomes")
    pre.add_argument("--seeds", type=_count(), default=None,
                     help="faithfulness and leaderboard: random seeds 0..N-1 (default 5)")
    pre.add_argument("--max-removed", type=_finite, default=d.max_removed,
                     help="faithfulness and leaderboard: the flip scan's limit, a fraction of the text tokens "
                          "(default 1.0: all)")
    pre.add_argument("--flip-bound", type=_count(), default=None,
                     help="faithfulness and leaderboard: the flip scan's limit in tokens (default: none)")
    pre.add_argument("--faithfulness-layers", default=None,
                     help="faithfulness: the attention ranking's layers lo-hi (1-based; default all)")
    pre.add_argument("--faithfulness-scaled", action="store_true",
                     help="faithfulness: scale the attention ranking by head importance")
    pre.add_argument("--explainers", default=None,
                     help="leaderboard: comma-separated explainers (default: all; IG takes --n-steps)")
    pre.add_argument("--rank-by", default=d.rank_by, choices=("signed", "magnitude"),
                     help="leaderboard: delete tokens by score (high to low) or by |score|")
    pre.add_argument("--limit", type=_count(), default=None, help="only the first N documents of the dataset")
    pre.add_argument("--shard", default="0/1", help="i/N: compute rows r with r %% N == i")
    pre.add_argument("--ray", action="store_true", help="run --workers shards as Ray tasks (RAY_ADDRESS or local)")
    pre.add_argument("--workers", type=_count(), default=None, help="shards on Ray (default: the cluster's GPUs, or 1)")
    pre.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    pre.add_argument("--threads", type=_count(), default=None, help="torch CPU threads of this process")
    pre.add_argument("--allow-version-change", action="store_true",
                     help="add to a store made with other versions of torch/transformers/captum/numpy")

    info = sub.add_parser("store-info", help="what a store holds; --verify checks every file")
    info.add_argument("path")
    info.add_argument("--verify", action="store_true", help="check every file's checksum")

    prune = sub.add_parser("prune-stores", help="delete the app's local stores not written for DAYS days")
    prune.add_argument("--older-than", type=_finite, required=True, metavar="DAYS")
    prune.add_argument("--cache-dir", default=None, help="default: $LONGVIZ_CACHE_DIR, else ~/.cache/longviz")
    prune.add_argument("--dry-run", action="store_true", help="only list them")

    _leaderboard_arguments(sub.add_parser("leaderboard",
                                          help="score every explainer by deletion on a dataset's documents"))
    return p


def _precompute(a) -> int:
    from .dataset.kinds import Settings
    from .dataset.ray import run_on_ray
    from .dataset.run import parse_shard, precompute

    settings = Settings(max_tokens=a.max_tokens, grid=a.grid, n_steps=a.n_steps, ig_method=a.ig_method,
                        target=a.target, precision=a.precision, importance_docs=a.importance_docs,
                        importance_method=a.importance_method, rbo_p=a.rbo_p, top=a.top,
                        mask_kinds=None if a.mask is None else [k for k in a.mask.split(",") if k.strip()],
                        layer_range=_layers(a.layer_range, "--layer-range"), replacement=a.replacement,
                        seeds=None if a.seeds is None else range(a.seeds), max_removed=a.max_removed,
                        flip_bound=a.flip_bound,
                        faithfulness_layers=_layers(a.faithfulness_layers, "--faithfulness-layers", span=True),
                        faithfulness_scaled=a.faithfulness_scaled, rank_by=a.rank_by,
                        explainers=None if a.explainers is None else [m.strip() for m in a.explainers.split(",") if m.strip()])
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


def _layers(spec: str | None, option: str, span: bool = False):
    """'lo-hi' (1-based, inclusive, or one layer) -> (lo, hi) 0-based, or with `span` every layer lo..hi."""
    if spec is None:
        return None
    try:
        lo, hi = (int(v) for v in (spec.split("-") if "-" in spec else (spec, spec)))
    except ValueError:
        raise ValueError(f"{option} must look like 2-4 (1-based layers), got {spec!r}") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"{option} {spec}: need 1 <= lo <= hi")
    return tuple(range(lo - 1, hi)) if span else (lo - 1, hi - 1)


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


def _prune_stores(a) -> int:
    from .dataset.stores import prune_local_stores

    old = prune_local_stores(a.older_than, a.cache_dir, dry_run=a.dry_run)
    for path in old:
        print(path)
    print(f"{'would delete' if a.dry_run else 'deleted'} {len(old)} local store(s) not written for {a.older_than:g} "
          "days", file=sys.stderr)
    return 0


def app_script(clone_root: Path | None = None) -> Path:
    """app.py of the clone this package was installed from (editable install); LongvizError when the package
    was installed without it."""
    clone_root = CLONE_ROOT if clone_root is None else clone_root
    script = clone_root / "app.py"
    if script.is_file() and (clone_root / "pages").is_dir():
        return script
    raise LongvizError(
        f"The app (app.py and pages/) is not part of the installed package, and {clone_root} has no app.py: the "
        "app needs a clone of the longviz repository. Clone it, install it with `pip install -e .` and run "
        "`longviz app`, or run `streamlit run app.py` in the clone.")


def _app(args: list[str]) -> int:
    script = app_script()
    # exec: streamlit gets the terminal, the signals and the exit status, as if started by hand
    os.execv(sys.executable, [sys.executable, "-m", "streamlit", "run", str(script), *args])


def _demo(a) -> int:
    from .demo import ensure_demo

    bar = None

    def progress(fraction: float, message: str) -> None:
        nonlocal bar
        if bar is None:
            from tqdm.auto import tqdm

            bar = tqdm(total=100, unit="%", dynamic_ncols=True, file=sys.stderr, desc="Building the demo")
        bar.n = round(100 * fraction)
        bar.set_postfix_str(message)

    try:
        demo = ensure_demo(a.cache_dir, progress=progress, rebuild=a.rebuild, name=a.model)
    finally:
        if bar is not None:
            bar.close()
    m = demo.metrics
    n = m["n_test"]
    accuracy = ", ".join(f"{m[f'accuracy_{t}']:.3f} ({round(m[f'accuracy_{t}'] * n)}/{n}) at {t:,} tokens"
                         for t in (2048, 4096))
    print(f"demo: {demo.root}\n"
          f"  model:   {demo.model_dir}\n"
          f"  dataset: {demo.dataset_path} ({m['n_docs']} documents, {n} held out)\n"
          f"held-out accuracy: {accuracy}")
    return 0


def _leaderboard_arguments(p) -> None:
    """The `longviz leaderboard` options."""
    from .attribution.explainers import DEFAULT_METHODS, EXPLAINERS
    from .dataset.leaderboard import MIN_SEEDS, RANK_BY
    from .model.encoding import DEFAULT_MAX_TOKENS
    from .evaluation.faithfulness import DEFAULT_SEEDS, REPLACEMENTS

    p.add_argument("--model", required=True, help="'demo', a checkpoint directory or a Hub id")
    p.add_argument("--dataset", required=True, help="'demo' or a CSV / Parquet / JSONL file")
    p.add_argument("--text-column", default=None)
    p.add_argument("--label-column", default=None)
    p.add_argument("--limit", type=_count(), default=10, help="the first N documents (default 10)")
    p.add_argument("--max-tokens", type=_count(3), default=DEFAULT_MAX_TOKENS)
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma-separated explainers (default: all but shapley, whose cost is 25 x the sentences)")
    p.add_argument("--target", type=int, default=None, help="class explained (default: each document's prediction)")
    p.add_argument("--ig-steps", type=_count(), default=EXPLAINERS["ig"].options["n_steps"])
    p.add_argument("--seeds", type=_count(), default=len(DEFAULT_SEEDS),
                   help=f"random seeds 0 .. N-1 (default {len(DEFAULT_SEEDS)}, at least {MIN_SEEDS})")
    p.add_argument("--replacement", default="mask", choices=REPLACEMENTS)
    p.add_argument("--max-removed", type=_finite, default=1.0, help="the flip scan's limit, a fraction (default 1)")
    p.add_argument("--flip-bound", type=_count(), default=None, help="the flip scan's limit in tokens (default: none)")
    p.add_argument("--rank-by", default="signed", choices=RANK_BY)
    p.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    p.add_argument("--threads", type=_count(), default=None, help="torch CPU threads of this process")
    p.add_argument("--store", default=None,
                   help="compute into (or resume, or read) this result store, as `longviz precompute --what "
                        "leaderboard --out` does (default: the local store under the cache root)")
    p.add_argument("--cache-dir", default=None,
                   help="the cache root of the local store and the flip scans (default: LONGVIZ_CACHE_DIR)")
    p.add_argument("--out", default=None, help="write the leaderboard as CSV here")
    p.add_argument("--runs", default=None, help="write every document's runs as CSV here")


def _leaderboard(a) -> int:
    """`longviz leaderboard`: the precompute's "leaderboard" kind for the first --limit documents (resumable), then
    the leaderboard printed (and written with --out)."""
    from .dataset import run, stores
    from .dataset.leaderboard import MIN_SEEDS, LeaderboardError, summarise
    from .dataset.store import ResultStore
    from .model.loading import load_dataset, load_model

    if a.seeds < MIN_SEEDS:
        raise LeaderboardError(f"--seeds must be at least {MIN_SEEDS}: random's floor is a mean ± sd over seeds")
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    options = {"ig": {"n_steps": a.ig_steps}} if "ig" in methods else None
    settings = run.leaderboard_settings(methods, a.target, max_tokens=a.max_tokens, seeds=range(a.seeds),
                                        replacement=a.replacement, max_removed=a.max_removed,
                                        flip_bound=a.flip_bound, rank_by=a.rank_by, options=options)
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    model = load_model(a.model, device=a.device)
    df = load_dataset(a.dataset, a.text_column, a.label_column, id2label=model.id2label)
    local = a.store is None
    out = stores.local_store_dir(model, df, settings, a.cache_dir) if local else a.store
    summary = run.precompute(model, df, out, "leaderboard", settings, limit=a.limit, show_bar=True,
                             model_source=a.model, dataset_source=a.dataset, use_cache=local, cache_dir=a.cache_dir)
    runs = ResultStore(out, a.limit).leaderboard_runs()
    table = summarise(runs, settings.ks)
    print(f"{runs['doc'].nunique()} documents ({summary.skipped['leaderboard']} found in the store {out})",
          file=sys.stderr)
    print(table[["method", "aopc", "aopc_sd", "lodds", "lodds_sd", "first_flip", "flip_rate", "seconds",
                 "best"]].to_string(index=False))
    from .export import table_csv

    if a.out:
        Path(a.out).write_bytes(table_csv(table))
    if a.runs:
        Path(a.runs).write_bytes(table_csv(runs))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    try:
        if argv[:1] == ["app"] and not {"-h", "--help"} & set(argv[1:2]):
            return _app(argv[1:])  # verbatim: streamlit's options and `-- app options` are not ours to parse
        a = parser.parse_args(argv)
        return {"precompute": _precompute, "store-info": _store_info, "prune-stores": _prune_stores, "demo": _demo,
                "leaderboard": _leaderboard}[a.command](a)
    except (LongvizError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the command was given: unreadable, a folder for a file, a full disk
        print(f"error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), file=sys.stderr)
        return 2
    except MemoryError:  # every file longviz parses is read within a bound; this is a model or run too large
        print("error: out of memory: this machine's memory does not hold the model, document or run asked for; "
              "use a smaller --max-tokens or --limit, or a machine with more memory.", file=sys.stderr)
        return 2
