"""The current model, dataset, document and analysis, read from the sidebar's choices (and the max tokens, unit
and masking options that go with them)."""
from __future__ import annotations

import os

import streamlit as st

import longviz_core as lv
from longviz_core import cache
from pages._ui import hosting
from pages._ui.keys import DOC_MODES, K
from pages._ui.shell import progress_bar, queue_notice


def current_model() -> lv.LoadedModel:
    """The chosen model, as the offer allows it (hosting.model_source: hosted, a configured one only)."""
    source = hosting.model_source(st.session_state.get(K.MODEL))
    if source == lv.DEMO:
        from longviz_core.demo import ensure_demo

        ensure_demo(progress=progress_bar("Building the offline demo (first run only)"))
    with st.spinner(f"Loading model {source}…"):
        return cache.get_model(source)


def current_dataset(model: lv.LoadedModel):
    """The chosen dataset as a normalised DataFrame, or None when there is none yet, or none the server offers
    (hosting.dataset_source decides which may be read)."""
    ss = st.session_state
    chosen = hosting.dataset_source(ss.get(K.DATASET_KIND), ss.get(K.DATASET_PATH))
    if chosen is None:
        return None
    kind, source = chosen
    if kind == "demo":
        return cache.get_dataset(lv.DEMO, model.id2label)
    if kind == "file path":
        # a hosted dataset may name its text/label columns in the configuration; locally they are detected
        return cache.get_dataset(source, model.id2label, *hosting.dataset_columns(hosting.config(), source))
    upload = ss.get(K.DATASET_UPLOAD) if hosting.uploads_allowed() else None
    if upload is None:
        return None
    return lv.load_dataset(upload.getvalue(), filename=upload.name, id2label=model.id2label)


def required_dataset(model: lv.LoadedModel, what: str, verb: str = "needs"):
    """current_dataset, or a DatasetError saying that `what` needs one and how to get one (hosting.dataset_needed)."""
    df = current_dataset(model)
    if df is None:
        raise lv.DatasetError(hosting.dataset_needed(what, verb))
    return df


def mask_options(analysis) -> dict:
    """The sidebar's masking options beyond the paper's rule and the analysis's special tokens (a decoder's
    template adds its own), as views.masking.build_mask keywords."""
    from longviz_core.views.masking import special_tokens_of

    ss = st.session_state
    words = sorted({w.strip().lower() for w in (ss.get(K.EXTRA_STOPWORDS) or "").split(",") if w.strip()})
    return {"numbers": bool(ss.get(K.MASK_NUMBERS, False)), "extra_stopwords": tuple(words),
            "special_tokens": special_tokens_of(analysis.encoded)}


def unit() -> str:
    """The sidebar's unit (model.segments.UNITS): what every per-token view reads the document by."""
    chosen = st.session_state.get(K.UNIT)
    return chosen if chosen in lv.UNITS else lv.UNITS[0]


def segments(analysis, of: str | None = None) -> lv.Segments:
    """The document's units of kind `of` (default: the sidebar's unit; lv.segment), kept with the analysis."""
    return cache.derived(analysis, "segments", lambda a, unit: lv.segment(a, unit), unit=of or unit())


PAGE_BUDGET_S = 15.0  # what a page may spend on one document's analysis and IG's first steps


def default_max_tokens(model: lv.LoadedModel) -> int:
    """The model's maximum when two IG steps and two forwards at that length (more than a page's analysis
    costs) take at most PAGE_BUDGET_S on this machine (timed once per model and length, then cached on
    disk), else DEFAULT_MAX_TOKENS; never above a hosted server's limit."""
    from longviz_core.attribution.budget import fitting_max_tokens

    def compute() -> int:
        with queue_notice():
            return fitting_max_tokens(model, PAGE_BUDGET_S)

    fitting = cache.memo(("default_max_tokens", model.fingerprint), compute)
    return min(fitting, hosting.max_tokens_limit(hosting.config()))


def max_tokens(model: lv.LoadedModel) -> int:
    """The sidebar's max tokens, or default_max_tokens when it is left empty."""
    chosen = st.session_state.get(K.MAX_TOKENS)
    return default_max_tokens(model) if chosen is None else int(min(chosen, model.max_tokens))


def export_settings(model: lv.LoadedModel, description: str, **options) -> dict:
    """What a downloaded file's run metadata records: the document, max tokens and the page's options."""
    return {"document": description, "max_tokens": max_tokens(model), **options}


def serving_store(model: lv.LoadedModel, df, kind: str, settings, only=None):
    """The first precomputed result store (`python -m longviz_core precompute`) found at LONGVIZ_STORE_DIR (a store
    or a folder of stores) for this model, dataset and max tokens that holds `kind` made with `settings`
    (dataset.stores.serves_view; `only`: the keys of the kind's settings the view reads); None when there is none."""
    from longviz_core.dataset.stores import serves_view

    root = os.environ.get("LONGVIZ_STORE_DIR", "").strip()
    if not root or df is None:
        return None
    stores = cache.get_stores(root, model.fingerprint, lv.dataset_fingerprint(df), max_tokens(model))
    return next((s for s in stores if serves_view(s, kind, settings, only)), None)


def dataset_probs(model: lv.LoadedModel, df):
    mt = max_tokens(model)
    key = ("predictions", model.fingerprint, lv.dataset_fingerprint(df), mt)
    return cache.memo(key, lambda: lv.predict_probs(model, df["text"], mt, progress_bar("Predicting the dataset")))


def positive_class(model: lv.LoadedModel) -> int:
    return 1 if model.num_labels > 1 else 0


def current_document(model: lv.LoadedModel):
    """(text, true label or None, description) of the chosen document."""
    ss = st.session_state
    mode = ss.get(K.DOC_MODE, DOC_MODES[0])
    if mode == "pasted text":
        text = ss.get(K.PASTED) or ""
        if not text.strip():
            raise lv.InputTextError("Paste a text in the sidebar to analyse it.")
        return text, None, "pasted text"
    df = required_dataset(model, f"The document mode '{mode}'")
    labels = df["label"].to_numpy() if "label" in df else None
    if mode == "by index":
        idx = int(ss.get(K.DOC_INDEX, 0))
        if idx >= len(df):
            raise lv.DatasetError(f"Index {idx} is past the end of the dataset ({len(df)} documents).")
    else:
        probs = dataset_probs(model, df)
        idx = lv.pick_document(probs, labels, mode.replace("random ", ""), positive_class(model), ss[K.DOC_SEED],
                               head=model.head)
        if idx is None:
            raise lv.DatasetError(f"No {mode.replace('random ', '')} in this dataset at these settings.")
    label = int(labels[idx]) if labels is not None else None
    return df["text"].iloc[idx], label, f"document {idx} ({mode})"


def announce_analysis(model: lv.LoadedModel, text: str, mt: int) -> None:
    """Before an analysis that takes long, how long (attribution.budget.analysis_notice), on the page."""
    from longviz_core.attribution.budget import analysis_notice

    notice = analysis_notice(model, model.encode(text, mt).n)
    if notice:
        st.info(notice)


def current_analysis():
    """(model, analysis, true label or None, description) of the current document."""
    model = current_model()
    text, label, description = current_document(model)
    mt = max_tokens(model)
    with queue_notice():
        analysis = cache.get_analysis(model, text, mt, before=lambda: announce_analysis(model, text, mt))
    enc = analysis.encoded
    if enc.truncated:  # on every page: each number below is about the first part of the text only
        specials = enc.prefix + enc.suffix
        st.warning(f"Truncated to {enc.n - specials:,} of {enc.n_text_tokens_original:,} text tokens (max tokens = "
                   f"{enc.max_tokens:,}, including {specials} special token{'s' if specials != 1 else ''}; the "
                   f"model allows {model.max_tokens:,}).")
    return model, analysis, label, description
