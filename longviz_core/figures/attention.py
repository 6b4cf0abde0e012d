"""Figures for the attention views: the layers x heads raster grid (PIL), a zoomable heatmap of one head and
bar charts of top-k counts (Altair). Pure builders: arrays / DataFrames in, images / charts out.

The grid is one raster image because 144 Altair facets of 64 x 64 cells (590,000 marks) are far too slow to
render; the zoom of a single head is an Altair chart (hover, click selection).
Layers and heads are labelled from 1 in figures, as in the paper ("layer 12" is the last of twelve).
"""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont

from ..views.counts import COUNT_MEANINGS, COUNT_RULES

LOG_FLOOR = 1e-3  # log colour scale: values below this fraction of the head's maximum get the lightest colour
SCALES: tuple[str, ...] = ("linear", "log")
# White -> deep blue (ColorBrewer "Blues" end points and mid tones): the saturation shows the magnitude, as in
# the paper; the same scheme as the Altair zoom ("blues").
_ANCHORS = np.array(
    [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]], dtype=np.float64
)
_GAP = 2  # pixels between tiles
_MARGIN_LEFT, _MARGIN_TOP, _BAR = 34, 18, 14
BAR_STEP = 20  # pixels per bar of a count chart: room for every label
LABEL_LIMIT = 400  # pixels of a category label before Vega would cut it


def colour_lut() -> np.ndarray:
    """(256, 3) uint8 colour table of the sequential scale."""
    x = np.linspace(0.0, 1.0, 256)
    stops = np.linspace(0.0, 1.0, len(_ANCHORS))
    return np.stack([np.interp(x, stops, _ANCHORS[:, c]) for c in range(3)], axis=1).round().astype(np.uint8)


def scale_values(values: np.ndarray, scale: str = "linear") -> np.ndarray:
    """Map values in [0, 1] to colour positions in [0, 1]; "log" spreads the decades from LOG_FLOOR to 1."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), 0.0, 1.0)
    if scale == "log":
        v = np.where(v > 0, (np.log10(np.maximum(v, LOG_FLOOR)) - np.log10(LOG_FLOOR)) / -np.log10(LOG_FLOOR), 0.0)
    return v


def grid_image(maps: np.ndarray, scale: str = "linear", tile_px: int = 128, title: str | None = None) -> Image.Image:
    """One RGB image of every head's map: rows = layers (1 at the top), columns = heads, labelled, with a
    colour bar. `maps` (layers, heads, g, g) with values in [0, 1] (see pooling.normalised_maps)."""
    maps = np.asarray(maps)
    if maps.ndim != 4 or maps.shape[-1] != maps.shape[-2] or 0 in maps.shape:
        raise ValueError(f"maps must have shape (layers, heads, g, g), got {maps.shape}")
    L, H, g, _ = maps.shape
    factor = max(1, int(tile_px) // g)
    tile = g * factor
    lut = colour_lut()
    colours = lut[(scale_values(maps, scale) * 255).round().astype(np.int64)]  # (L, H, g, g, 3)
    colours = colours.repeat(factor, axis=2).repeat(factor, axis=3)  # (L, H, tile, tile, 3)
    top = _MARGIN_TOP + (16 if title else 0)
    font = _font()
    low, high = ("0" if scale == "linear" else f"<{LOG_FLOOR:g}"), f"head max ({scale})"
    # one or two heads make a grid narrower than its colour bar's labels or its title: the image widens to them
    width = int(max(_MARGIN_LEFT + H * (tile + _GAP) + 8, _MARGIN_LEFT + font.getlength(low) + 12
                    + font.getlength(high) + 8, _MARGIN_LEFT + font.getlength(title or "") + 8))
    height = top + L * (tile + _GAP) + _BAR + 28
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    for layer in range(L):
        y = top + layer * (tile + _GAP)
        for head in range(H):
            x = _MARGIN_LEFT + head * (tile + _GAP)
            canvas[y : y + tile, x : x + tile] = colours[layer, head]
    bar_y = top + L * (tile + _GAP) + 6
    bar_w = min(width - _MARGIN_LEFT - 8, 300)
    canvas[bar_y : bar_y + _BAR, _MARGIN_LEFT : _MARGIN_LEFT + bar_w] = lut[
        np.linspace(0, 255, bar_w).round().astype(np.int64)
    ][None, :, :]
    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    if title:
        draw.text((_MARGIN_LEFT, 2), title, fill=(0, 0, 0), font=font)
    for head in range(H):
        draw.text((_MARGIN_LEFT + head * (tile + _GAP) + tile // 2 - 8, top - 14), f"H{head + 1}", fill=(60, 60, 60),
                  font=font)
    for layer in range(L):
        draw.text((2, top + layer * (tile + _GAP) + tile // 2 - 6), f"L{layer + 1}", fill=(60, 60, 60), font=font)
    draw.text((_MARGIN_LEFT, bar_y + _BAR + 2), low, fill=(60, 60, 60), font=font)
    draw.text((_MARGIN_LEFT + bar_w - font.getlength(high), bar_y + _BAR + 2), high, fill=(60, 60, 60), font=font)
    return image


def zoom_value_text(value: float) -> str:
    """A zoom cell's value as its tooltip prints it (pages use it for the clicked cell, so both agree)."""
    return f"{value:.3g}"


def head_zoom_chart(cells: np.ndarray, edges: np.ndarray, scale: str = "linear", title: str = "",
                    relative: bool = False, select: bool = True, value_title: str = "mean attention") -> alt.Chart:
    """Heatmap of one head's pooled map (queries down, keys across, in token positions or, for dataset-wide
    maps, fractions of the document). With `select`, a click selects a cell (selection parameter "cell",
    fields query_block and key_block). The tooltip prints each cell's value under `value_title` as
    zoom_value_text does. Empty cells are left out (white background). Streamlit serialises the
    data itself; elsewhere, maps with over 5,000 non-empty cells need `alt.data_transformers.disable_max_rows()`
    (inline records instead would make Altair validate every row, seconds per chart)."""
    cells = np.asarray(cells, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.float64)
    g = cells.shape[0]
    if cells.ndim != 2 or cells.shape[1] != g or edges.shape != (g + 1,):
        raise ValueError(f"cells must be (g, g) and edges (g + 1,), got {cells.shape} and {edges.shape}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    q, k = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
    peak = cells.max()
    shown = cells / peak if peak > 0 else cells
    if scale == "log":
        shown = np.maximum(shown, LOG_FLOOR)
    frame = pd.DataFrame({
        "query_block": q.ravel(), "key_block": k.ravel(),
        "q0": edges[q.ravel()], "q1": edges[q.ravel() + 1], "k0": edges[k.ravel()], "k1": edges[k.ravel() + 1],
        "attention": cells.ravel(), "relative": shown.ravel(),
    })
    frame = frame[frame["attention"] > 0]  # empty cells (outside the band) show as the white background
    frame = frame.assign(value=[zoom_value_text(v) for v in frame["attention"]])
    unit = "fraction of document" if relative else "token position"
    fmt = ".2f" if relative else "d"
    chart = alt.Chart(frame, title=title).mark_rect().encode(
        x=alt.X("k0:Q", title=f"key ({unit})", scale=alt.Scale(domain=[edges[0], edges[-1]], nice=False)),
        x2=alt.X2("k1:Q"),
        y=alt.Y("q0:Q", title=f"query ({unit})", scale=alt.Scale(domain=[edges[0], edges[-1]], reverse=True,
                                                                   nice=False)),
        y2=alt.Y2("q1:Q"),
        color=alt.Color("relative:Q", title="attention / head max",
                        scale=alt.Scale(scheme="blues", type="log" if scale == "log" else "linear",
                                        domain=[LOG_FLOOR if scale == "log" else 0.0, 1.0])),
        tooltip=[alt.Tooltip("q0:Q", title="queries from", format=fmt), alt.Tooltip("q1:Q", title="to", format=fmt),
                 alt.Tooltip("k0:Q", title="keys from", format=fmt), alt.Tooltip("k1:Q", title="to", format=fmt),
                 alt.Tooltip("value:N", title=value_title)],
    ).properties(width=520, height=520)
    if select:
        chart = chart.add_params(alt.selection_point(name="cell", fields=["query_block", "key_block"], on="click"))
    return chart


def counts_bar_chart(frame: pd.DataFrame, title: str = "", top_n: int = 10, colour: str = "#2171b5",
                     rule: str | None = None) -> alt.Chart:
    """Horizontal bars of the `top_n` first rows of a token_counts table (by type, word or position), in the
    table's order (most counted on top), labelled by the token (type) or the word, one BAR_STEP-pixel row per bar
    so every label shows, never cut. The axis says what a count is under the table's counting rule (`rule`, else
    the table's `attrs["count_rule"]`, else the paper's) and the subtitle names the rule."""
    name = "word" if "word" in frame.columns else "token"
    if "count" not in frame.columns or name not in frame.columns:
        raise ValueError("expected a token_counts table (columns token or word, count[, position])")
    rule = _count_rule(frame, rule)
    top = frame.head(int(top_n)).copy()
    if "position" in top.columns:
        top["label"] = top[name].astype(str) + " @" + top["position"].astype(str)
        shown = [name, "position"]
    else:
        top["label"] = top[name].astype(str)
        shown = [name]
    top["rank"] = np.arange(len(top))
    tooltip = [*map(alt.Tooltip, shown), alt.Tooltip("count:Q", title=f"count ({COUNT_MEANINGS[rule]})")]
    return alt.Chart(top, title=_rule_title(title, rule)).mark_bar(color=colour).encode(
        x=alt.X("count:Q", title="count"),
        y=alt.Y("label:N", title=None, sort=alt.EncodingSortField(field="rank", order="ascending"),
                axis=alt.Axis(labelLimit=LABEL_LIMIT, labelOverlap=False)),
        tooltip=tooltip,
    ).properties(height=alt.Step(BAR_STEP), autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))


def instances_chart(frame: pd.DataFrame, title: str = "", rule: str | None = None, n: int | None = None) -> alt.Chart:
    """Count of each instance of one token along the document (paper Fig. 6): one bar per position on an axis
    spanning the whole document (positions 0 to n - 1 when the document's length `n` is given); masked
    instances grey. `frame` from counts.instance_counts; the subtitle says what a count is and names the rule
    (the vertical axis is too short for the sentence)."""
    if not {"position", "count"} <= set(frame.columns):
        raise ValueError("expected an instance_counts table (columns position, token, count, masked)")
    rule = _count_rule(frame, rule)
    data = frame.assign(state=np.where(frame.get("masked", False), "masked", "counted"))
    heading = alt.TitleParams(text=title, subtitle=[f"count = {COUNT_MEANINGS[rule]},", f"counted {COUNT_RULES[rule]}"],
                              anchor="start")
    return alt.Chart(data, title=heading).mark_bar(size=4).encode(
        x=alt.X("position:Q", title="token position in the document",
                scale=alt.Scale(domain=[0, n - 1], nice=False) if n else alt.Undefined),
        y=alt.Y("count:Q", title="count"),
        color=alt.Color("state:N", scale=alt.Scale(domain=["counted", "masked"], range=["#2171b5", "#bdbdbd"]),
                        legend=alt.Legend(title=None)),
        tooltip=[alt.Tooltip(c) for c in ("position", "token", "count", "state")],
    ).properties(height=220, autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))


def _count_rule(frame: pd.DataFrame, rule: str | None) -> str:
    rule = rule or frame.attrs.get("count_rule") or "paper"
    if rule not in COUNT_RULES:
        raise ValueError(f"rule must be one of {tuple(COUNT_RULES)}, got {rule!r}")
    return rule


def _rule_title(title: str, rule: str) -> alt.TitleParams:
    return alt.TitleParams(text=title, subtitle=f"counted {COUNT_RULES[rule]}", anchor="start")


def _font():
    try:
        return ImageFont.load_default(size=12)
    except TypeError:  # Pillow < 10.1 has no sized default font
        return ImageFont.load_default()
