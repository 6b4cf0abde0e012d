"""Download buttons for a page's figures and tables, each with the run metadata beside it.

Pages call `download_chart(chart, name, model, settings)` under an Altair chart, `download_table(df, ...)`
under a table and `download_image(image, ...)` under a raster. Files are rendered only when the user clicks
(deferred downloads), so a page does not pay for vl-convert on every rerun.
"""
from __future__ import annotations

import streamlit as st

import longviz_core as lv
from longviz_core import export
from pages import _hosting
from pages._common import K


def download_chart(chart, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None) -> None:
    """PNG, SVG (and metadata JSON when `model` is given) for an Altair chart."""
    stem = export.safe_filename(name)
    buttons = [("PNG", lambda: export.chart_png(chart), f"{stem}.png", "image/png"),
               ("SVG", lambda: export.chart_svg(chart), f"{stem}.svg", "image/svg+xml")]
    _row(stem, buttons, model, settings)


def download_table(df, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None) -> None:
    """CSV (and metadata JSON) for a table."""
    stem = export.safe_filename(name)
    _row(stem, [("CSV", lambda: export.table_csv(df), f"{stem}.csv", "text/csv")], model, settings)


def download_image(image, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None) -> None:
    """PNG (and metadata JSON) for a raster: a PIL image, an image array or PNG bytes."""
    stem = export.safe_filename(name)
    data = (lambda: image) if isinstance(image, bytes) else (lambda: export.image_png(image))
    _row(stem, [("PNG", data, f"{stem}.png", "image/png")], model, settings)


def download_metadata(model: lv.LoadedModel, settings: dict, name: str) -> None:
    """The run metadata alone (model, revision, settings, package versions)."""
    stem = export.safe_filename(name)
    _row(stem, [], model, settings)


def _row(stem: str, buttons: list, model, settings) -> None:
    if model is not None:
        meta = lambda: export.metadata_json(  # noqa: E731
            export.run_metadata(model, settings or {}, model_name=_hosting.display_name(model)))
        buttons = [*buttons, ("Metadata", meta, f"{stem}.json", "application/json")]
    row = st.container(horizontal=True, gap="small")
    for label, data, file_name, mime in buttons:
        row.download_button(f"⬇ {label}", data=data, file_name=file_name, mime=mime, on_click="ignore",
                            key=K.page("export", file_name), help=f"Download {file_name}")
