"""Session-state keys (all of them live here) and the sidebar's fixed choices: what every page helper shares,
in a module that imports no other page helper (so the other page helpers
import it, not each other)."""
from __future__ import annotations


class K:
    """Session-state keys. Page-specific widgets use `K.page(page, name)` so every key is built here."""

    MODEL = "model_source"
    DATASET_KIND = "dataset_kind"
    DATASET_PATH = "dataset_path"
    DATASET_UPLOAD = "dataset_upload"
    DOC_MODE = "doc_mode"
    DOC_INDEX = "doc_index"
    DOC_SEED = "doc_seed"
    PASTED = "pasted_text"
    MAX_TOKENS = "max_tokens"
    MASK_NUMBERS = "mask_numbers"
    EXTRA_STOPWORDS = "extra_stopwords"
    UNIT = "unit"  # what every per-token view reads the document by (model.segments.UNITS)
    IMPORTED_IMPORTANCE = "attention.imported_importance"  # (layers, heads) array imported on the heatmap page

    @staticmethod
    def page(page: str, name: str) -> str:
        return f"{page}.{name}"

    @staticmethod
    def option(page: str, name: str) -> dict:
        """`key=` and `bind=` for a page option: its value lives under K.page(page, name) and in the URL, so a
        copied link reopens the view with this option set (see pages/_ui/links.py)."""
        return {"key": K.page(page, name), "bind": "query-params"}


DOC_MODES = ("by index", "random false negative", "random false positive", "most confident positive", "pasted text")
DATASET_KINDS = ("demo", "file path", "upload")
# the sidebar's units (model.segments.UNITS, the first the default), named in the plural where a page counts them
UNIT_NAMES = {"token": "tokens", "word": "words", "sentence": "sentences", "paragraph": "paragraphs"}
