"""Figures that read in a browser (issue 15): sizes, axes, legends and tooltips fixed in the chart specs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from longviz_core.figures import agreement as afig
from longviz_core.figures import attention as fig
from longviz_core.figures import faithfulness as ffig
from longviz_core.figures.text import scale_max
from longviz_core.views.similarity import METRICS


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def test_head_heatmap_is_layers_by_heads_with_range_legend_and_tooltip():
    grid = np.arange(12 * 8, dtype=float).reshape(8, 12) / 95 * 2 - 1  # (layers, heads) over tau's range
    spec = afig.head_agreement_heatmap(grid, "kendall_tau").to_dict()
    assert (spec["width"], spec["height"]) == (12 * afig.HEAD_CELL[0], 8 * afig.HEAD_CELL[1])
    rect = _layers(spec)[0]["encoding"]
    assert rect["x"]["field"] == "head" and rect["y"]["field"] == "layer"
    assert rect["x"]["axis"]["labelAngle"] == 0 and rect["y"]["axis"]["labelAngle"] == 0
    lo, hi = METRICS["kendall_tau"]["range"]
    colour = rect["color"]["condition"]
    assert colour["scale"]["domain"] == [lo, hi] and colour["legend"]["values"] == [lo, (lo + hi) / 2, hi]
    assert f"({lo:g} to {hi:g})" in colour["title"]
    assert [t["field"] for t in rect["tooltip"]] == ["layer", "head", "label"]
    rows = next(iter(spec["datasets"].values()))
    assert rows[0]["label"] == f"{grid[0, 0]:.2f}"  # the tooltip shows the printed value
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}  # narrows to the page, keeps its height
    small = afig.head_agreement_heatmap(np.zeros((2, 2)), "rbo").to_dict()
    assert (small["width"], small["height"]) == (300, 200)  # never a thin line


def test_deletion_curves_fixed_aspect_axes_and_band():
    ks = [0.01, 0.05, 0.1, 0.2, 0.5]
    curves = pd.concat([
        pd.DataFrame({"ranking": "|IG|", "k": ks, "probability": [0.9, 0.8, 0.6, 0.4, 0.2]}),
        pd.DataFrame({"ranking": "Random", "k": ks, "probability": [0.95, 0.94, 0.9, 0.85, 0.7],
                      "probability_lo": [0.9] * 5, "probability_hi": [0.99] * 5}),
    ])
    spec = ffig.deletion_curves_chart(curves, "probability").to_dict()
    assert (spec["width"], spec["height"]) == ffig.CURVE_SIZE
    band, line = _layers(spec)
    assert band["mark"]["type"] == "area" and band["mark"]["clip"] and line["mark"]["clip"]
    enc = line["encoding"]
    # the probability axis whole; the removed fraction's axis ends where the curves do, at the next tenth
    assert enc["x"]["scale"]["domain"] == [0, 0.5] and enc["y"]["scale"]["domain"] == [0, 1]
    for last, end in ((0.25, 0.3), (1.0, 1.0), (0.3, 0.3)):
        longer = ffig.deletion_curves_chart(curves.assign(k=curves["k"].replace(0.5, last)), "probability")
        assert _layers(longer.to_dict())[-1]["encoding"]["x"]["scale"]["domain"] == [0, end]
    assert enc["color"]["legend"]["orient"] == "bottom"
    assert "mean ± sd over seeds" in spec["title"]["subtitle"]
    aopc = ffig.deletion_curves_chart(curves.assign(aopc=0.1), "aopc").to_dict()
    assert _layers(aopc)[-1]["encoding"]["y"]["scale"] == {"zero": True}


def test_count_bars_give_every_label_a_row():
    frame = pd.DataFrame({"token": [f"a-rather-long-token-{i}" for i in range(25)], "count": range(25, 0, -1)})
    spec = fig.counts_bar_chart(frame, top_n=25).to_dict()
    assert spec["height"] == {"step": fig.BAR_STEP}
    axis = spec["encoding"]["y"]["axis"]
    assert axis["labelOverlap"] is False and axis["labelLimit"] == fig.LABEL_LIMIT
    assert spec["encoding"]["x"]["type"] == "quantitative"  # horizontal bars
    assert [r["label"] for r in next(iter(spec["datasets"].values()))] == frame["token"].tolist()


def test_instances_span_the_document():
    frame = pd.DataFrame({"position": [3, 50], "token": ["model", "model"], "count": [4, 2], "masked": [False, False]})
    spec = fig.instances_chart(frame, "'model'", n=400).to_dict()
    assert spec["encoding"]["x"]["scale"]["domain"] == [0, 399]
    assert spec["encoding"]["x"]["title"] == "token position in the document"


def test_zoom_tooltip_prints_what_the_page_prints():
    cells = np.array([[0.5, 0.0], [0.123456, 1.0]])
    spec = fig.head_zoom_chart(cells, np.array([0.0, 2.0, 4.0]), value_title="attention / head max").to_dict()
    rows = next(iter(spec["datasets"].values()))
    assert {r["value"] for r in rows} == {fig.zoom_value_text(v) for v in (0.5, 0.123456, 1.0)} == {"0.5", "0.123", "1"}
    assert {"field": "value", "type": "nominal", "title": "attention / head max"} in spec["encoding"]["tooltip"]


@pytest.mark.parametrize("tokens, values, mask, expected", [
    (["<s>", "Ġmodel", "Ġthe", "</s>"], [724.9, 2.0, 3.0, 50.0], None, 3.0),  # special tokens stay out
    (["<s>", "Ġmodel", "Ġthe", "</s>"], [724.9, 2.0, 3.0, 50.0], [True, False, True, True], 2.0),
    (["<s>", "Ġa", "Ġb"], [0.1, -0.4, 0.3], None, 0.4),  # |value| for signed scores
    (["<s>", "</s>"], [1.0, 2.0], None, 0.0),
])
def test_overlay_scale_leaves_out_special_and_masked_tokens(tokens, values, mask, expected):
    assert scale_max(tokens, values, mask) == expected


def test_charts_take_channel_objects_only_in_the_tests():
    """tests/conftest.py makes encode() refuse shorthand strings and value dicts (they cost altair 4-6 ms a channel,
    tests/support/channels.py): the figures above all passed; the objects write the same spec as the shorthand."""
    import altair as alt
    import pandas as pd

    chart = alt.Chart(pd.DataFrame({"a": [1.0], "b": [2.0]})).mark_rect()
    with pytest.raises(TypeError, match="x2='b:Q'"):
        chart.encode(x=alt.X("a:Q"), x2="b:Q")
    with pytest.raises(TypeError, match="y="):
        chart.encode(y=alt.value(3))
    drawn = chart.encode(x=alt.X("a:Q"), x2=alt.X2("b:Q"), y=alt.YValue(3), tooltip=[alt.Tooltip("a")]).to_dict()
    assert drawn["encoding"] == {"x": {"field": "a", "type": "quantitative"}, "x2": {"field": "b"},
                                 "y": {"value": 3}, "tooltip": [{"field": "a", "type": "quantitative"}]}
