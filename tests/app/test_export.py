"""Exports: charts to PNG / SVG, tables to CSV, rasters to PNG, run metadata; and the download buttons."""
from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from importlib import metadata

import altair as alt
import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest

from longviz_core import export


def _red_square():
    # one rect covering the whole plot: the PNG's centre must be pure red
    df = pd.DataFrame({"x": [0], "x2": [1], "y": [0], "y2": [1]})
    unit = alt.Scale(domain=[0, 1])
    return (alt.Chart(df, title="Red square").mark_rect(color="#ff0000")
            .encode(x=alt.X("x:Q", scale=unit), x2=alt.X2("x2"), y=alt.Y("y:Q", scale=unit), y2=alt.Y2("y2"))
            .properties(width=100, height=80))


def test_chart_png_is_the_chart_at_the_requested_scale():
    png = export.chart_png(_red_square(), scale=2)
    img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    assert 200 <= w <= 400 and 160 <= h <= 340  # plot 100x80 at 2x, plus axes and title
    one = Image.open(io.BytesIO(export.chart_png(_red_square(), scale=1)))
    assert abs(one.size[0] * 2 - w) <= 2
    # the plot area sits right of the y axis and below the title; sample inside it
    px = np.asarray(img)
    red = (px[..., 0] > 240) & (px[..., 1] < 15) & (px[..., 2] < 15)
    assert red.sum() >= 0.9 * 200 * 160


def test_chart_svg_is_vector_with_the_title():
    svg = export.chart_svg(_red_square())
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    texts = ["".join(t.itertext()) for t in root.iter() if t.tag.endswith("text")]
    assert "Red square" in texts
    assert b"#ff0000" in svg.lower() or b"rgb(255, 0, 0)" in svg.lower() or b"red" in svg.lower()


def test_chart_functions_refuse_other_objects():
    with pytest.raises(ValueError, match="Altair chart"):
        export.chart_png(pd.DataFrame())
    with pytest.raises(ValueError, match="Altair chart"):
        export.chart_svg("not a chart")
    with pytest.raises(ValueError, match="scale"):
        export.chart_png(_red_square(), scale=0)


def test_table_csv_round_trips_unicode():
    df = pd.DataFrame({"token": ["naïve", "“quoted”", "a,b"], "score": [0.5, -1.25, 3.0], "rank": [1, 2, 3]})
    data = export.table_csv(df)
    assert data.startswith(b"\xef\xbb\xbf")  # BOM: spreadsheets detect UTF-8
    back = pd.read_csv(io.BytesIO(data), encoding="utf-8-sig")
    pd.testing.assert_frame_equal(back, df)
    with pytest.raises(ValueError, match="DataFrame"):
        export.table_csv([1, 2])


def test_standalone_html_is_a_complete_page_around_the_overlay():
    body = '<span style="background: rgb(0, 128, 0)">naïve</span>'
    page = export.standalone_html(body, title="Attribution <doc 3>").decode("utf-8")
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert "<title>Attribution &lt;doc 3&gt;</title>" in page  # escaped title, raw body
    assert body in page and page.rstrip().endswith("</html>")
    with pytest.raises(ValueError, match="HTML"):
        export.standalone_html("  ")


def test_image_png_from_arrays_and_pil():
    rng = np.random.default_rng(0)
    floats = rng.random((7, 9, 3))
    got = np.asarray(Image.open(io.BytesIO(export.image_png(floats))))
    assert got.shape == (7, 9, 3) and np.array_equal(got, np.round(floats * 255).astype(np.uint8))
    rgba = rng.integers(0, 256, (5, 4, 4), dtype=np.uint8)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(export.image_png(rgba)))), rgba)
    gray = Image.fromarray(rng.integers(0, 256, (3, 3), dtype=np.uint8))
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(export.image_png(gray)))), np.asarray(gray))
    with pytest.raises(ValueError, match="shape"):
        export.image_png(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        export.image_png(np.full((2, 2), 3.0))


def test_run_metadata(tiny_longformer):
    settings = {"max_tokens": np.int64(512), "mask": True, "layers": (0, 1), "weights": np.array([0.5, 0.5])}
    meta = export.run_metadata(tiny_longformer, settings)
    back = json.loads(export.metadata_json(meta))
    assert back["model"]["fingerprint"] == tiny_longformer.fingerprint
    assert back["model"]["name"] == tiny_longformer.source
    assert back["model"]["num_layers"] == 2 and back["model"]["num_heads"] == 2
    assert back["model"]["revision"] is None  # a local directory has no Hub commit
    assert back["settings"] == {"max_tokens": 512, "mask": True, "layers": [0, 1], "weights": [0.5, 0.5]}
    assert back["packages"]["torch"] == metadata.version("torch") and torch.__version__.startswith(
        back["packages"]["torch"].split("+")[0])
    assert back["packages"]["transformers"] == metadata.version("transformers")
    assert export.run_metadata(tiny_longformer, {}, model_name="Lab model")["model"]["name"] == "Lab model"
    with pytest.raises(ValueError, match="mapping"):
        export.run_metadata(tiny_longformer, [("a", 1)])


def test_safe_filename():
    assert export.safe_filename("document 12 (random false negative)") == "document_12_random_false_negative"
    assert export.safe_filename("../../etc/passwd") == "etc_passwd"
    assert export.safe_filename("///") == "longviz"
    assert len(export.safe_filename("x" * 500)) == 120


DOWNLOADS_APP = """
import altair as alt, numpy as np, pandas as pd, streamlit as st
from pages._ui import export as _export
df = pd.DataFrame({"token": ["a", "b"], "score": [1.0, 2.0]})
chart = alt.Chart(df).mark_bar().encode(x=alt.X("token"), y=alt.Y("score"))
st.altair_chart(chart)
_export.download_chart(chart, "scores chart")
_export.download_table(df, "scores table")
_export.download_image(np.zeros((4, 4, 3), dtype=np.uint8), "grid")
"""

SHOWN_APP = """
import altair as alt, numpy as np, pandas as pd, streamlit as st
from pages._ui import export as _export
df = pd.DataFrame({"token": ["a", "b"], "score": [1.0, 2.0]})
chart = alt.Chart(df).mark_bar().encode(x=alt.X("token"), y=alt.Y("score"))
tab, = st.tabs(["t"])
_export.chart(chart, "scores chart", where=tab)
_export.table(df, "scores table")
_export.image(np.zeros((4, 4, 3), dtype=np.uint8), "grid")
_export.overlay("<span>a b</span>", df, "overlay")
"""


def test_show_and_download_helpers_draw_the_export_and_its_buttons():
    at = AppTest.from_string(SHOWN_APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert len(at.tabs[0].children) == 2  # the chart (AppTest knows it as an unknown element) and its buttons
    assert [b.label for b in at.tabs[0].get("download_button")] == ["⬇ PNG", "⬇ SVG"]
    assert at.dataframe[0].value.equals(pd.DataFrame({"token": ["a", "b"], "score": [1.0, 2.0]}))
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["⬇ PNG", "⬇ SVG", "⬇ CSV", "⬇ PNG", "⬇ HTML", "⬇ CSV"]


APART_APP = """
import pandas as pd
from pages._ui import export as _export
df = pd.DataFrame({"k": [1, 2]})
_export.download_table(df, "curves", label="Every ranking's curves")
_export.download_table(df, "seeds", label="Random's curve for each seed")
_export.download_table(df, "plain")
"""


def test_a_table_downloaded_apart_from_its_view_is_named_on_its_own_row():
    """Two rows of the same buttons under a chart would not say which table each is: a label leads its own row."""
    at = AppTest.from_string(APART_APP, default_timeout=60)
    at.run()
    assert not at.exception
    rows = [[(c.type, c.value if c.type == "caption" else c.label) for c in row.children.values()]
            for row in at.main.children.values()]
    assert rows == [[("caption", "Every ranking's curves"), ("download_button", "⬇ CSV")],
                    [("caption", "Random's curve for each seed"), ("download_button", "⬇ CSV")],
                    [("download_button", "⬇ CSV")]]


def test_download_buttons_appear_under_each_export():
    at = AppTest.from_string(DOWNLOADS_APP, default_timeout=60)
    at.run()
    assert not at.exception
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["⬇ PNG", "⬇ SVG", "⬇ CSV", "⬇ PNG"]
