"""Train an offline demo and time it (issue 2 asks for <= 3 minutes on 2 CPU cores).

    .venv/bin/python benchmarks/demo_build.py [--demo demo|demo-modernbert|demo-decoder] [--out DIR] [--ship]

--ship writes the trained model, tokenizer and metrics into longviz_core/demo/shipped/<family>/ (with their
checksums), which is what the package ships and `ensure_demo` restores instead of training.

Prints wall and CPU time per stage (from the progress callback), the machine's load, held-out
accuracies, document length statistics and the model's size on disk.  A busy machine inflates the
wall time: compare the load average printed at start and end.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from longviz_core.demo import (  # noqa: E402
    DECODER,
    LONGFORMER,
    MODERNBERT,
    SHIPPED,
    SHIPPED_DECODER,
    SHIPPED_MODERNBERT,
    build_demo,
    file_checksums,
)

DEMOS = {"demo": (LONGFORMER, SHIPPED), "demo-modernbert": (MODERNBERT, SHIPPED_MODERNBERT),
         "demo-decoder": (DECODER, SHIPPED_DECODER)}


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, help="build here (default: a temporary directory, removed afterwards)")
    ap.add_argument("--demo", choices=sorted(DEMOS), default="demo", help="which demo to train")
    ap.add_argument("--ship", action="store_true", help="copy the trained model and metrics into the package")
    a = ap.parse_args()
    recipe, shipped = DEMOS[a.demo]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} at start")
    start_wall, start_cpu = time.perf_counter(), time.process_time()

    def progress(fraction: float, message: str) -> None:
        print(f"{time.perf_counter() - start_wall:7.1f}s wall {time.process_time() - start_cpu:7.1f}s cpu "
              f"{fraction:5.2f}  {message}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or Path(tmp) / "demo"
        paths = build_demo(out, progress, recipe)
        wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
        m = paths.metrics
        print(f"build: {wall:.1f} s wall, {cpu:.1f} s cpu, load average {os.getloadavg()[0]:.1f} at end")
        print(f"held-out accuracy: {m['accuracy_2048']:.3f} at 2048 tokens, {m['accuracy_4096']:.3f} at 4096 "
              f"({m['n_test']} documents; {m['n_train']} for training)")
        print(f"training-crop accuracy per epoch: {', '.join(f'{x:.3f}' for x in m['train_accuracy_per_epoch'])}")
        print(f"document lengths (tokens): {json.dumps(m['token_lengths'])}")
        print(f"vocabulary {m['vocab_size']}, parameters {m['n_parameters']:,}, "
              f"model dir {_size_mb(paths.model_dir):.1f} MB, dataset {_size_mb(paths.dataset_path):.2f} MB")
        if a.ship:
            _ship(paths.root, shipped)
            print(f"shipped: {shipped}")


def _ship(built: Path, shipped: Path) -> None:
    shutil.rmtree(shipped, ignore_errors=True)
    shutil.copytree(built / "model", shipped / "model")
    shutil.copyfile(built / "metrics.json", shipped / "metrics.json")
    sums = file_checksums(shipped, skip=("CHECKSUMS.json",))
    (shipped / "CHECKSUMS.json").write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
