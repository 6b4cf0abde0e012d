"""Charts and display tables for agreement (Altair + pandas; no Streamlit).

- `head_agreement_heatmap`: layers x heads grid of a per-head agreement metric, the tooltip showing the
  cell's printed value.
- `table1` / `table2`: the agreement table with the paper's columns and readable labels.
"""
from __future__ import annotations

from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd

from ..views.similarity import METRICS
from .layout import FIT_WIDTH, layered, require_columns

HEAD_CELL = (36, 28)  # width, height in pixels of one head's cell


def head_agreement_heatmap(grid, metric: str = "rbo", title: str | None = None) -> alt.Chart:
    """Layers x heads heatmap (rows = layers, 1-based as in the paper, layer 1 at the top) of a per-head
    agreement metric, one HEAD_CELL per head (never smaller than 300 x 200 px; shown across the page's width,
    the cells narrow to fit it), every layer and head labelled,
    a colour legend over the metric's whole range and a tooltip (layer, head, value); NaN (a head whose attention
    is constant) is drawn grey."""
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 2 or 0 in grid.shape:
        raise ValueError(f"grid must be (layers, heads), got shape {grid.shape}")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}")
    layers, heads = np.meshgrid(np.arange(grid.shape[0]), np.arange(grid.shape[1]), indexing="ij")
    data = pd.DataFrame({"layer": layers.ravel() + 1, "head": heads.ravel() + 1, "value": grid.ravel()})
    data["label"] = [f"{v:.2f}" if np.isfinite(v) else "—" for v in data["value"]]
    lo, hi = METRICS[metric]["range"]
    name = METRICS[metric]["label"]
    base = alt.Chart().encode(  # the data goes on the layer (`layered`)
        x=alt.X("head:O", title="head", axis=alt.Axis(labelAngle=0, orient="top")),
        y=alt.Y("layer:O", title="layer", axis=alt.Axis(labelAngle=0)))
    rect = base.mark_rect().encode(
        color=alt.ColorValue(**alt.condition(
            "isValid(datum.value) && isFinite(datum.value)",
            alt.Color("value:Q", title=f"{name} ({lo:g} to {hi:g})", scale=alt.Scale(scheme="viridis", domain=[lo, hi]),
                      legend=alt.Legend(values=[lo, (lo + hi) / 2, hi], gradientLength=160, titleLimit=0)),
            alt.value("#dddddd"))),
        tooltip=[alt.Tooltip("layer:O", title="layer"), alt.Tooltip("head:O", title="head"),
                 alt.Tooltip("label:N", title=name)])
    text = base.mark_text(fontSize=10).encode(
        text=alt.Text("label:N"),
        color=alt.ColorValue(**alt.condition("datum.value > " + str((lo + hi) / 2), alt.value("black"),
                                             alt.value("white"))))
    cell_w, cell_h = HEAD_CELL
    return layered(data, rect, text).properties(
        title=alt.TitleParams(title or f"{name} per head", subtitle="higher = agrees more with |IG|", anchor="start"),
        width=max(300, cell_w * grid.shape[1]), height=max(200, cell_h * grid.shape[0]), autosize=FIT_WIDTH)


def table1(table: pd.DataFrame, metrics: Sequence[str] = ("cosine", "kendall_tau", "rbo"),
           digits: int = 3) -> pd.DataFrame:
    """The agreement table as the paper prints it: Attention layer, Is scaled?, Is masked?, then the metrics
    with their readable labels, rounded. Accepts agreement_table rows or a mean_std_table."""
    require_columns(table, ["source", "scaled", "masked", *metrics])
    out = pd.DataFrame({
        "Attention": table["source"].to_numpy(),
        "Scaled by head importance": np.where(table["scaled"].astype(bool), "yes", "no"),
        "Masked": table["masked"].to_numpy(),
    })
    if "documents" in table:
        out["Documents"] = table["documents"].to_numpy()
    for name in metrics:
        col = table[name]
        numeric = pd.api.types.is_numeric_dtype(col)
        out[METRICS[name]["label"]] = (col.round(digits) if numeric else col).to_numpy()
    if "note" in table and table["note"].astype(bool).any():
        out["Note"] = table["note"].to_numpy()
    return out


def table2(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """Table 2: the top-5 % Jaccard column only."""
    return table1(table, ("jaccard_top",), digits)
