"""Download buttons for a page's figures and tables, each with the run metadata beside it.

Pages show a figure or table and its buttons in one call: `chart(...)` for an Altair chart (PNG, SVG),
`table(...)` for a DataFrame (CSV), `image(...)` for a raster (PNG) and `overlay(...)` for a coloured text
(standalone HTML plus the per-token values as CSV). The lower-level `download_*` functions add the buttons
alone. Files are rendered only when the user clicks (deferred downloads), so a page does not pay for
vl-convert on every rerun. File names must be unique on a page: they key the buttons.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import streamlit as st

import longviz_core as lv
from longviz_core import export
from pages._ui import hosting as _hosting
from pages._ui import overlay_view
from pages._ui.keys import K


def chart(figure, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None, *, where=st,
          **kwargs):
    """Show an Altair chart in `where` (st, a column, a tab) with its downloads; returns st.altair_chart's value."""
    shown = where.altair_chart(figure, **kwargs)
    download_chart(figure, name, model, settings, where=where)
    return shown


def table(df, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None, *, where=st,
          **kwargs):
    """Show a DataFrame (index hidden) with its CSV download; returns st.dataframe's value."""
    shown = where.dataframe(df, **{"hide_index": True, **kwargs})
    download_table(df, name, model, settings, where=where)
    return shown


def image(picture, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None, *, where=st,
          **kwargs) -> None:
    """Show a raster with its PNG download."""
    where.image(picture, **kwargs)
    download_image(picture, name, model, settings, where=where)


def overlay(body_html: str, values_df, name: str, model: lv.LoadedModel | None = None,
            settings: dict | None = None, *, where=st, height: int = overlay_view.HEIGHT, legend_html: str = "",
            header_html: str = "", selected: int | None = None, on_pick: Callable[[int], None] | None = None,
            n: int | None = None) -> None:
    """Show a coloured-text overlay (in a box `height` pixels high at most that scrolls, under its legend) with
    a standalone HTML file of it and its values (`values_df`, one row per unit, token or word, in order) as CSV.
    `selected` (the position of a box: a word's is its first token) is outlined and scrolled into view; with
    `on_pick`, a click on a box calls it with that position (pages/_ui/overlay_view.py), one of `n` token
    positions (default: one per row of `values_df`). `header_html` heads the HTML file only (the page shows its
    header with widgets of its own)."""
    stem = export.safe_filename(name)
    with nullcontext() if where is st else where:
        if legend_html:
            st.html(legend_html)
        overlay_view.show(body_html, key=K.page("overlay", stem), n=len(values_df) if n is None else n,
                          selected=selected, on_pick=on_pick, height=height)
    body_html = header_html + legend_html + body_html
    buttons = [("HTML", lambda: export.standalone_html(body_html, title=name), f"{stem}.html", "text/html"),
               ("CSV", lambda: export.table_csv(values_df), f"{stem}.csv", "text/csv")]
    _row(stem, buttons, model, settings, where)


def download_chart(chart, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None, *,
                   where=st) -> None:
    """PNG, SVG (and metadata JSON when `model` is given) for an Altair chart."""
    stem = export.safe_filename(name)
    buttons = [("PNG", lambda: export.chart_png(chart), f"{stem}.png", "image/png"),
               ("SVG", lambda: export.chart_svg(chart), f"{stem}.svg", "image/svg+xml")]
    _row(stem, buttons, model, settings, where)


def download_table(df, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None, *,
                   where=st, label: str | None = None) -> None:
    """CSV (and metadata JSON) for a table; `label` names it on the row when the table is not shown above it."""
    stem = export.safe_filename(name)
    _row(stem, [("CSV", lambda: export.table_csv(df), f"{stem}.csv", "text/csv")], model, settings, where, label)


def download_image(image, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None, *,
                   where=st) -> None:
    """PNG (and metadata JSON) for a raster: a PIL image, an image array or PNG bytes."""
    stem = export.safe_filename(name)
    data = (lambda: image) if isinstance(image, bytes) else (lambda: export.image_png(image))
    _row(stem, [("PNG", data, f"{stem}.png", "image/png")], model, settings, where)


def _row(stem: str, buttons: list, model, settings, where=st, label: str | None = None) -> None:
    if model is not None:
        meta = lambda: export.metadata_json(  # noqa: E731
            export.run_metadata(model, settings or {}, model_name=_hosting.display_name(model)))
        buttons = [*buttons, ("Metadata", meta, f"{stem}.json", "application/json")]
    row = where.container(horizontal=True, gap="small", vertical_alignment="center")
    if label:  # a row of its own: two rows of "CSV, Metadata" would not say which table each one is
        row.caption(label, width="content")
    for kind, data, file_name, mime in buttons:
        row.download_button(f"⬇ {kind}", data=data, file_name=file_name, mime=mime, on_click="ignore",
                            key=K.page("export", file_name), help=f"Download {file_name}")
