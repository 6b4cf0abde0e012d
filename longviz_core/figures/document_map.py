"""The document map's strip (Altair; no Streamlit): every passage of a `DocumentMap` as a rectangle along the
document, as wide as its tokens, coloured by its score per token in the overlay's colours; the top passages
marked by a bar under their extent and their rank above it; the selected passage outlined. docs/methods.md,
"Document map"."""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ..views.document_map import DocumentMap
from .layout import FIT_WIDTH

# The overlay's colours (figures/text.py: hsl(hue, 75%, 100 - 50 |x|)): white at 0, green (120) or red (0) at
# full saturation. For a fixed hue and saturation, RGB is linear in the lightness from 50 % to 100 %, so an "rgb"
# interpolation between the ends gives the overlay's ramp.
WHITE, GREEN, RED = "#ffffff", "hsl(120, 75%, 50%)", "hsl(0, 75%, 50%)"
MODES = ("diverging", "sequential")
SELECTED = "#1f6feb"  # the overlay's outline of the selected token (figures/text.py)
# Pixel rows of the plot: the top passages' ranks, their bars, the strip. The chart is 150 px tall with its
# title and axis, the least the page checks accept (tests/support/browser.py).
RANK_Y, BAR_Y, STRIP_Y, HEIGHT = 9, (18, 23), (25, 72), 72
SELECT = "passage"  # the strip's click selection (a page may rerun on it: fields start, the passage's first token)


def document_map_chart(dmap: DocumentMap, mode: str = "diverging", selected: int | None = None,
                       score_name: str = "score", title: str | None = None) -> alt.LayerChart:
    """The strip of `dmap` across the page's width: x = token position 0 .. n; each passage a rectangle over its
    tokens coloured by its density (score / tokens) on a scale of +-max |density| ("diverging": red < 0 < green)
    or 0 .. max ("sequential": white to red); the top passages with a black bar and their rank; `selected` (a
    passage index) outlined. A click on a rectangle selects it (selection SELECT, field start)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    m = len(dmap)
    top = np.zeros(m, dtype=bool)
    top[dmap.top] = True
    data = pd.DataFrame({"start": dmap.starts, "stop": dmap.stops, "middle": (dmap.starts + dmap.stops) / 2,
                         "tokens": dmap.stops - dmap.starts, "score": dmap.scores, "density": dmap.density,
                         "share": dmap.share, "rank": dmap.rank, "text": dmap.labels, "top": top,
                         "selected": np.arange(m) == (-1 if selected is None else selected)})
    vmax = float(np.abs(dmap.density).max(initial=0.0)) or 1.0  # an all-zero map draws white
    scale = (alt.Scale(domain=[-vmax, 0, vmax], range=[RED, WHITE, GREEN], interpolate="rgb")
             if mode == "diverging" else alt.Scale(domain=[0, vmax], range=[WHITE, RED], interpolate="rgb"))
    positions = alt.Scale(domain=[0, dmap.n], nice=False, zero=True)
    x = alt.X("start:Q", title=None, scale=positions, axis=alt.Axis(format=",d", tickCount=8, grid=False))
    unit = dmap.unit
    tooltip = [alt.Tooltip("rank:Q", title="rank"), alt.Tooltip("text:N", title=unit),
               alt.Tooltip("score:Q", title=score_name, format="+.4g"),
               alt.Tooltip("share:Q", title="share of Σ|score|", format=".1%"),
               alt.Tooltip("density:Q", title="per token (colour)", format="+.3g"),
               alt.Tooltip("start:Q", title="first token", format=",d"), alt.Tooltip("tokens:Q", title="tokens")]
    click = alt.selection_point(name=SELECT, fields=["start"], on="click", clear=False, empty=False)
    strip = alt.Chart(data).mark_rect().encode(
        x=x, x2=alt.X2("stop:Q"), y=alt.YValue(STRIP_Y[0]), y2=alt.Y2Value(STRIP_Y[1]),
        color=alt.Color("density:Q", scale=scale, legend=None), tooltip=tooltip).add_params(click)
    marked = alt.Chart(data[data["top"]])
    bars = marked.mark_rect(color="black").encode(x=x, x2=alt.X2("stop:Q"), y=alt.YValue(BAR_Y[0]),
                                                  y2=alt.Y2Value(BAR_Y[1]), tooltip=tooltip)
    ranks = marked.mark_text(fontSize=11, fontWeight="bold", baseline="middle").encode(
        x=alt.X("middle:Q", scale=positions), y=alt.YValue(RANK_Y), text=alt.Text("rank:Q"),
        tooltip=tooltip)
    outline = alt.Chart(data[data["selected"]]).mark_rect(fill=None, stroke=SELECTED, strokeWidth=2).encode(
        x=x, x2=alt.X2("stop:Q"), y=alt.YValue(STRIP_Y[0] - 1), y2=alt.Y2Value(STRIP_Y[1] + 1))
    signed = "red < 0 < green" if mode == "diverging" else "white = 0, red = the most"
    ranked = "by score, high to low" if dmap.rank_by == "signed" else "by |score|"
    return (strip + bars + ranks + outline).properties(
        title=alt.TitleParams(title or f"Document map: {m:,} {unit}s over {dmap.n:,} tokens", anchor="start",
                              subtitle=[f"x = token position; colour = {score_name} per token of each {unit} "
                                        f"({signed}), width = its tokens;",
                                        f"1 to {len(dmap.top)}: the top {unit}s {ranked}"]),
        height=HEIGHT, autosize=FIT_WIDTH)
