"""Attention figures: the raster grid's geometry and colours, the zoom chart's cells and selection, bar charts."""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import pytest

from longviz_core.figures import attention as fig


def test_colour_scale_ends_and_log_mapping():
    lut = fig.colour_lut()
    assert lut.shape == (256, 3) and lut.dtype == np.uint8
    assert lut[0].tolist() == [247, 251, 255] and lut[-1].tolist() == [8, 48, 107]
    assert np.all(np.diff(lut.astype(int).sum(axis=1)) <= 0)  # darker as the value grows
    np.testing.assert_allclose(fig.scale_values([0.0, 0.5, 1.0]), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(fig.scale_values([0.0, 1e-4, 1e-3, 1e-2, 1.0], "log"), [0, 0, 0, 1 / 3, 1])
    with pytest.raises(ValueError):
        fig.scale_values([0.5], "sqrt")


def test_grid_image_places_each_head_in_its_tile():
    L, H, g = 3, 4, 8
    maps = np.zeros((L, H, g, g))
    maps[2, 1, 3, 5] = 1.0  # one bright cell: layer 3, head 2, query block 3, key block 5
    img = fig.grid_image(maps, tile_px=32)  # 4 pixels per cell
    arr = np.asarray(img)
    factor, tile = 4, 32
    x = fig._MARGIN_LEFT + 1 * (tile + fig._GAP) + 5 * factor + 1
    y = fig._MARGIN_TOP + 2 * (tile + fig._GAP) + 3 * factor + 1
    assert arr[y, x].tolist() == [8, 48, 107]
    assert arr[y, x + factor].tolist() == [247, 251, 255]  # the neighbouring cell is zero
    assert img.width == fig._MARGIN_LEFT + H * (tile + fig._GAP) + 8
    dark = np.all(arr == [8, 48, 107], axis=-1)
    dark[-40:] = False  # ignore the colour bar
    assert dark.sum() == factor * factor


@pytest.mark.parametrize("scale", fig.SCALES)
@pytest.mark.parametrize("heads", [1, 2])
def test_a_narrow_grid_keeps_its_colour_bar_labels_and_title_whole(heads, scale):
    title = "Layer x head attention, example 0"
    img = fig.grid_image(np.full((1, heads, 16, 16), 0.5), scale=scale, tile_px=32, title=title)
    arr = np.asarray(img).astype(int)
    # ink (non-white pixels) of the label row under the colour bar: it must end before the image's last column
    label_rows = arr[-24:]
    ink = np.nonzero((label_rows < 200).any(axis=-1).any(axis=0))[0]
    font = fig._font()
    assert ink.max() < img.width - 4
    assert img.width >= fig._MARGIN_LEFT + font.getlength(f"head max ({scale})") + 8
    assert img.width >= fig._MARGIN_LEFT + font.getlength(title) + 8


def test_grid_image_rejects_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        fig.grid_image(np.zeros((2, 2, 4, 5)))


def test_zoom_chart_cells_positions_and_selection():
    cells = np.zeros((4, 4))
    cells[np.arange(4), np.arange(4)] = [0.4, 0.3, 0.2, 0.1]
    cells[0, 1] = 0.05
    edges = np.array([0, 10, 20, 30, 35])
    spec = fig.head_zoom_chart(cells, edges, scale="log", title="L1 H1").to_dict()
    rows = list(spec["datasets"].values())[0]
    assert len(rows) == 5  # empty cells left out
    diag = {(r["query_block"], r["key_block"]): r for r in rows}
    assert diag[(3, 3)]["q0"] == 30 and diag[(3, 3)]["q1"] == 35
    assert diag[(0, 0)]["relative"] == 1.0 and diag[(3, 3)]["relative"] == pytest.approx(0.25)
    assert spec["mark"]["type"] == "rect"
    assert spec["encoding"]["color"]["scale"]["type"] == "log"
    assert spec["encoding"]["y"]["scale"]["reverse"] is True
    assert spec["params"][0]["name"] == "cell"


def test_zoom_chart_large_maps_render_without_the_row_guard():
    cells = np.random.default_rng(0).random((128, 128))
    chart = fig.head_zoom_chart(cells, np.arange(129.0))
    with alt.data_transformers.disable_max_rows():
        assert len(list(chart.to_dict()["datasets"].values())[0]) == 128 * 128


def test_counts_bar_chart_keeps_table_order():
    frame = pd.DataFrame({"position": [7, 2, 9], "token": ["model", "data", "model"], "count": [9, 5, 5]})
    spec = fig.counts_bar_chart(frame, top_n=2).to_dict()
    rows = list(spec["datasets"].values())[0]
    assert [r["label"] for r in rows] == ["model @7", "data @2"]
    assert spec["encoding"]["y"]["sort"] == {"field": "rank", "order": "ascending"}
    by_type = fig.counts_bar_chart(frame[["token", "count"]]).to_dict()
    assert [r["label"] for r in list(by_type["datasets"].values())[0]] == ["model", "data", "model"]
    with pytest.raises(ValueError):
        fig.counts_bar_chart(pd.DataFrame({"x": [1]}))


def test_instances_chart_marks_masked_instances():
    frame = pd.DataFrame({"position": [3, 50], "token": ["the", "the"], "count": [4, 0], "masked": [False, True]})
    rows = list(fig.instances_chart(frame).to_dict()["datasets"].values())[0]
    assert [r["state"] for r in rows] == ["counted", "masked"]
