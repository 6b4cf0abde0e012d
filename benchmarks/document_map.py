"""The document map's cost (docs/methods.md, "Document map"): what a page adds to draw it from scores it has.

    python benchmarks/document_map.py

On the demo's document 0 (all its tokens) and on 8,192 tokens of the demo tokenizer's text (the demo corpus
repeated), with random scores: the sentences (lv.segment, after a first call that imports nltk; a page keeps
them per document in cache.derived), the map (views.document_map) and its strip's Vega-Lite spec
(figures.document_map, to_dict as Streamlit sends it). The median of 5 runs of each, in milliseconds.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import numpy as np  # noqa: E402

import longviz_core as lv  # noqa: E402
from longviz_core.figures.document_map import document_map_chart  # noqa: E402
from longviz_core.model.encoding import encode  # noqa: E402
from longviz_core.views.document_map import document_map  # noqa: E402


def _ms(fn) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main() -> None:
    model = lv.load_model("demo")
    texts = lv.load_dataset("demo")["text"]
    first = lv.analyze(model, texts.iloc[0], 4096)
    enc = encode(model.tokenizer, "\n\n".join(texts.iloc[:12]), 8192)  # the tokenizer alone: past the demo's 4,096
    long = SimpleNamespace(text="\n\n".join(texts.iloc[:12]), encoded=enc, tokens=enc.tokens, n=enc.n)
    lv.segment(first, "sentence")  # imports nltk
    print(f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, load {os.getloadavg()[0]:.1f}")
    print("tokens  sentences  segment ms  map ms  strip spec ms")
    for doc in (first, long):
        scores = np.random.default_rng(0).normal(size=doc.n)
        seg = lv.segment(doc, "sentence")
        dmap = document_map(scores, seg)
        print(f"{doc.n:6,}  {len(seg):9,}  {_ms(lambda: lv.segment(doc, 'sentence')):10.1f}  "
              f"{_ms(lambda: document_map(scores, seg)):6.1f}  "
              f"{_ms(lambda: document_map_chart(dmap, selected=0).to_dict()):13.1f}")


if __name__ == "__main__":
    main()
