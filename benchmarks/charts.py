"""What building a chart costs in Python before Streamlit sends it: altair's channel conversion and layering.

    python benchmarks/charts.py

Two comparisons in this process, alternating, medians of 20 builds (milliseconds):
- the head-agreement heatmap's two layers (4 x 4 heads) encoded with channel objects, as the figures do, against the
  same channels as shorthand strings and `alt.value` / `alt.condition` dicts (altair converts each of those through
  `SchemaBase.from_dict`, which hashes every schema class it knows: vega/altair#3547);
- those layers joined as `rect + text` over one shared DataFrame (altair hashes each layer's data through its text
  form and deep-copies the layers to hoist it) against `figures.layout.layered` (the data on the layer).
Both pairs write the same Vega-Lite spec (checked here). Then the figures as the pages draw them: build, and
`to_dict()` as Streamlit calls it (with altair's validation of the whole spec).
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import altair as alt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from longviz_core.figures import agreement, explainers, faithfulness  # noqa: E402
from longviz_core.figures.layout import layered  # noqa: E402

REPEATS = 20


def _ms(fn) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def _heatmap_layers(data: pd.DataFrame, objects: bool, base: alt.Chart):
    """The head heatmap's rect and text layers (figures/agreement.py), channels as objects or as shorthand."""
    colour = alt.condition("isValid(datum.value)", alt.Color("value:Q", scale=alt.Scale(scheme="viridis")),
                           alt.value("#dddddd"))
    shade = alt.condition("datum.value > 0.5", alt.value("black"), alt.value("white"))
    if objects:
        rect = base.mark_rect().encode(x=alt.X("head:O"), y=alt.Y("layer:O"), color=alt.ColorValue(**colour),
                                       tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("label:N")])
        text = base.mark_text().encode(x=alt.X("head:O"), y=alt.Y("layer:O"), text=alt.Text("label:N"),
                                       color=alt.ColorValue(**shade))
    else:
        rect = base.mark_rect().encode(x="head:O", y="layer:O", color=colour, tooltip=["layer:O", "label:N"])
        text = base.mark_text().encode(x="head:O", y="layer:O", text="label:N", color=shade)
    return rect, text


def main() -> None:
    rng = np.random.default_rng(0)
    layers, heads = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    data = pd.DataFrame({"layer": layers.ravel() + 1, "head": heads.ravel() + 1, "value": rng.random(16)})
    data["label"] = [f"{v:.2f}" for v in data["value"]]
    print(f"{platform.machine()} {platform.processor() or ''}, {len(os.sched_getaffinity(0))} cores, "
          f"load {os.getloadavg()[0]:.1f}; altair {alt.__version__}; medians of {REPEATS}, ms")

    def channels(objects):
        return lambda: _heatmap_layers(data, objects, alt.Chart(data))

    def joined(how):
        def build():
            if how == "layered":
                return layered(data, *_heatmap_layers(data, True, alt.Chart()))
            rect, text = _heatmap_layers(data, True, alt.Chart(data))
            return rect + text
        return build

    assert [c.to_dict() for c in channels(True)()] == [c.to_dict() for c in channels(False)()]
    assert joined("layered")().to_dict() == joined("+")().to_dict()
    pairs = {"channels": (channels(False), channels(True), "shorthand", "objects"),
             "layers": (joined("+"), joined("layered"), "a + b, shared data", "layered(data, a, b)")}
    for name, (old, new, old_name, new_name) in pairs.items():
        old(), new()  # first calls: altair's caches
        a, b = [], []
        for _ in range(3):  # alternating, so both see the same machine
            a.append(_ms(old))
            b.append(_ms(new))
        print(f"{name:9s} {old_name} {statistics.median(a):7.2f}  {new_name} {statistics.median(b):7.2f}  "
              f"ratio {statistics.median(a) / statistics.median(b):5.1f} x")

    curves = pd.DataFrame([(r, k, float(rng.random())) for r in ("|IG|", "Random")
                           for k in (0.01, 0.05, 0.1, 0.2, 0.5)], columns=["ranking", "k", "aopc"])
    flips = pd.DataFrame({"ranking": ["|IG|", "Random", "Random"], "flip_fraction": [0.1, 0.4, np.nan]})
    names = ["ig", "occlusion", "gradient", "attention", "random"]
    matrix = pd.DataFrame(rng.random((5, 5)), index=names, columns=names)
    figures = {"head agreement heatmap, 12 x 12": lambda: agreement.head_agreement_heatmap(rng.random((12, 12)),
                                                                                         "cosine"),
               "deletion curves": lambda: faithfulness.deletion_curves_chart(curves),
               "first-flip chart": lambda: faithfulness.flip_chart(flips),
               "explainer agreement, 5 x 5": lambda: explainers.agreement_heatmap(matrix, "kendall_tau")}
    print("figure                             build   to_dict")
    for name, build in figures.items():
        chart = build()
        print(f"{name:33s} {_ms(build):6.1f}  {_ms(chart.to_dict):7.1f}")


if __name__ == "__main__":
    main()
