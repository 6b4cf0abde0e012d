"""Exports: charts as PNG / SVG, tables as CSV, rasters as PNG, and the run metadata that makes them citable.

Charts are rendered by vl-convert (Altair's own offline engine: no browser, no network), so a figure downloaded
from the app is the same Vega-Lite spec the page shows. Every function returns bytes ready for a download.
"""
from __future__ import annotations

import csv
import io
import json
import platform
import re
from datetime import datetime, timezone
from typing import Mapping

import altair as alt
import numpy as np
import pandas as pd

from ._disk import package_versions

# Packages whose versions decide the numbers and the pictures.
PACKAGES = ("torch", "transformers", "captum", "tokenizers", "numpy", "pandas", "scipy", "rbo", "altair",
            "vl-convert-python", "streamlit")


def chart_png(chart, scale: float = 2.0) -> bytes:
    """An Altair chart rendered to PNG (`scale` 2 = sharp on high-density screens and in papers)."""
    _check_chart(chart)
    if not 0 < scale <= 8:
        raise ValueError(f"scale must be in (0, 8], got {scale}.")
    buf = io.BytesIO()
    chart.save(buf, format="png", scale_factor=scale)
    return buf.getvalue()


def chart_svg(chart) -> bytes:
    """An Altair chart rendered to SVG (vector: editable and lossless in papers)."""
    _check_chart(chart)
    buf = io.StringIO()
    chart.save(buf, format="svg")
    return buf.getvalue().encode("utf-8")


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def table_csv(df: pd.DataFrame, index: bool = False) -> bytes:
    """A table as UTF-8 CSV (with a byte-order mark, so spreadsheet programs detect the encoding).

    Text that a spreadsheet would run as a formula (a cell or header starting with =, +, -, @, tab or CR;
    tokens and document texts are user data) gets a leading apostrophe, which spreadsheets read as "this is
    text". Numbers are left alone: -0.5 in a numeric column is a number, not a formula. A cell holding a
    line break is quoted (RFC 4180, CRLF rows), so it stays one cell."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"Expected a pandas DataFrame, got {type(df).__name__}.")
    safe = df.copy()
    safe.columns = _escape_labels(safe.columns)
    if index:
        safe.index = _escape_labels(safe.index)
    for i in range(safe.shape[1]):
        col = safe.iloc[:, i]
        if not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_datetime64_any_dtype(col)):
            safe.isetitem(i, col.astype(object).map(_escape_cell))
    return safe.to_csv(index=index, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n").encode("utf-8-sig")


def _escape_labels(labels: pd.Index) -> pd.Index:
    """Row or column labels escaped as cells, every level of a MultiIndex and the levels' names included (they
    are written as cells too)."""
    if isinstance(labels, pd.MultiIndex):
        escaped = labels.set_levels([level.map(_escape_cell) for level in labels.levels])
    else:
        escaped = labels.map(_escape_cell)
    return escaped.set_names([_escape_cell(name) for name in labels.names])


def _escape_cell(value):
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value


def image_png(image) -> bytes:
    """A raster (PIL image, or an array (h, w), (h, w, 3) or (h, w, 4) of uint8 or floats in [0, 1]) as PNG."""
    from PIL import Image

    if not isinstance(image, Image.Image):
        arr = np.asarray(image)
        if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (3, 4)) or arr.size == 0:
            raise ValueError(f"Expected an image array (h, w[, 3|4]), got shape {arr.shape}.")
        if arr.dtype != np.uint8:
            if not np.issubdtype(arr.dtype, np.floating) or np.nanmin(arr) < 0 or np.nanmax(arr) > 1:
                raise ValueError("Image arrays must be uint8, or floats in [0, 1].")
            arr = np.round(np.nan_to_num(arr) * 255).astype(np.uint8)
        image = Image.fromarray(arr)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def standalone_html(body_html: str, title: str = "longviz") -> bytes:
    """A coloured-text overlay (figures.text's HTML, inline styles only) as a complete UTF-8 HTML page that
    opens in any browser, offline."""
    if not isinstance(body_html, str) or not body_html.strip():
        raise ValueError("Expected the overlay's HTML as a non-empty string.")
    import html

    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title></head>\n"
            "<body style=\"font-family: sans-serif; max-width: 60em; margin: 2em auto;\">\n"
            f"{body_html}\n</body></html>\n")
    return page.encode("utf-8")


def run_metadata(model, settings: Mapping, model_name: str | None = None) -> dict:
    """What produced an export: the model (name, fingerprint, revision, shape), the view's settings and the
    package versions. `model` is a LoadedModel; `model_name` replaces its source (hosted mode shows names,
    not server paths)."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"settings must be a mapping, got {type(settings).__name__}.")
    config = getattr(model.model, "config", None)
    return {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {
            "name": model_name or model.source,
            "fingerprint": model.fingerprint,
            # the Hub commit a checkpoint was downloaded at; None for a local directory
            "revision": getattr(config, "_commit_hash", None),
            "model_type": getattr(config, "model_type", None),
            "num_layers": model.num_layers,
            "num_heads": model.num_heads,
            "attention_window": model.attention_window,  # one-sided, the largest over layers
            "attention_windows": list(model.attention_windows),  # one-sided, per layer
            "id2label": {str(k): v for k, v in model.id2label.items()},
            "device": str(model.device),
        },
        "settings": {str(k): _jsonable(v) for k, v in settings.items()},
        "python": platform.python_version(),
        "packages": package_versions(PACKAGES),
    }


def metadata_json(meta: Mapping) -> bytes:
    return json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")


def safe_filename(name: str) -> str:
    """A download file name from a free text (document descriptions, model names)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._")
    return stem[:120] or "longviz"


def _check_chart(chart) -> None:
    if not isinstance(chart, alt.TopLevelMixin):
        raise ValueError(f"Expected an Altair chart, got {type(chart).__name__}.")


def _jsonable(value):
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return str(value)
