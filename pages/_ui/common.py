"""What every page shares: the sidebar, accessors for the current model / dataset / document / analysis, an
error guard and a progress adapter; the session-state keys (K, in pages/_ui/keys.py) are re-exported here.

Pages import this module; it only arranges widgets and calls the core."""
from __future__ import annotations

import logging
import os
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import streamlit as st

import longviz_core as lv
from longviz_core import cache
from pages._ui import export, hosting, labels
from pages._ui.keys import DATASET_KINDS, DOC_MODES, K

log = logging.getLogger(__name__)


def run_through_app() -> None:
    """Call first on every page. Streamlit treats a `pages/` folder as an old-style multipage app until the
    process's first `st.navigation()` call, so a link straight to a page, opened before anyone opened the
    app's root, runs that page file alone: no sidebar, and this folder's helper modules listed as pages.
    Leaving that mode (the flag st.navigation itself clears) and rerunning makes app.py run, and it shows the
    linked page, with the link's settings, through its own navigation.

    AppTest resets the flag before every run of its own, so there it would rerun on every interaction and
    drop the widget changes under test; AppTest drives app.py's navigation directly and is left alone."""
    from streamlit import config
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and not config.get_option("global.appTest"):
        PagesManager.uses_pages_directory = False
        st.rerun()


@contextmanager
def guard():
    """The one error contract of every page (app.py runs each page inside it; pages add their own around
    a step whose error should stop the page at that point). A LongvizError is the user's to fix: its message as
    st.error. Anything else is a bug: one short line, the traceback in a collapsed box for a bug report, and
    the log. Either way the page stops there, never on Streamlit's "Something went wrong" page."""
    try:
        yield
    except lv.LongvizError as exc:
        st.error(str(exc))
        st.stop()
    except Exception as exc:
        log.exception("Unexpected error on a page")
        first = (str(exc).strip().splitlines() or [""])[0]
        st.error(f"Unexpected error: {type(exc).__name__}: {first}".rstrip(": "))
        with st.expander("Details for a bug report", expanded=False):
            st.code(traceback.format_exc(), language=None)
        st.stop()


WHOLE_TABLE_ROWS = 30  # a table up to this long is shown whole, never in a scrolling box
_ROW_PX = 35  # st.dataframe's row (and header) height


def table(df, name: str, model: lv.LoadedModel | None = None, settings: dict | None = None, *, where=st,
          download=None, **kwargs):
    """A table with its CSV download (of `download` when given: the same numbers in a machine-friendly shape),
    sized to show every row of a table up to WHOLE_TABLE_ROWS long."""
    if len(df) <= WHOLE_TABLE_ROWS:
        kwargs.setdefault("height", _ROW_PX * (len(df) + 1) + 3)
    if download is None:
        return export.table(df, name, model, settings, where=where, **kwargs)
    shown = where.dataframe(df, **{"hide_index": True, **kwargs})
    export.download_table(download, name, model, settings, where=where)
    return shown


NO_ARROW = {"delta_color": "off", "delta_arrow": "off"}  # st.metric deltas that are notes, not a direction


def wrappable(name: str) -> str:
    """A class name for a metric tile: a zero-width space after every underscore, so a long name such as
    `artificial_intelligence` wraps between its words, never inside one (display only: never a key or a link)."""
    return name.replace("_", "_\u200b")

# Metric tiles wrap their label, value and note between words (see wrappable) instead of cutting a long class
# name with an ellipsis; the value's font shrinks with a narrow tile (1,024 px, five tiles a row) so a word fits
# its line.
PAGE_STYLE = ('<style>[data-testid="stMetricValue"] > div, [data-testid="stMetricValue"] p, '
              '[data-testid="stMetricLabel"] p, [data-testid="stMetricDelta"] p {white-space: normal !important; '
              'overflow: visible !important; text-overflow: clip !important; overflow-wrap: break-word;} '
              '[data-testid="stMetric"] {container-type: inline-size;} '
              '[data-testid="stMetricValue"] {font-size: clamp(1rem, 14cqi, 1.6rem);}</style>')


def page_style() -> None:
    st.html(PAGE_STYLE)


LOCAL_MAX_IG_STEPS = 5000


def max_ig_steps() -> int:
    """The most Integrated Gradients steps a page may ask for: a hosted server's `max_ig_steps`, else 5,000."""
    return hosting.max_ig_steps(hosting.config(), LOCAL_MAX_IG_STEPS)


def ig_steps_picker(col, page: str, name: str = "steps", custom: bool = False, label: str = "IG steps") -> int:
    """An IG steps selectbox in `col` offering the presets within max_ig_steps() (presets above a hosted cap
    give way to one at the cap) and, with `custom`, a number input for any count up to the cap."""
    from longviz_core.attribution import STEP_PRESETS

    cap = max_ig_steps()
    presets = {label: n for label, n in STEP_PRESETS.items() if n <= cap}
    if len(presets) < len(STEP_PRESETS):
        presets[f"{cap} steps (this server's limit)"] = cap
    choice = col.selectbox(label, [*presets, *(["custom"] if custom else [])], **K.option(page, name))
    if choice in presets:
        return presets[choice]
    return int(col.number_input("Custom steps", 2, cap, min(100, cap), **K.option(page, name + "_n")))


def progress_bar(label: str):
    """A core `Progress` callback drawing an st.progress bar, created on first use and removed when the job
    reports it is done (fraction 1), so no finished bar stays on the page."""
    slot = None

    def update(fraction: float, message: str) -> None:
        nonlocal slot
        if slot is None:
            slot = st.empty()
        if fraction >= 1.0:
            slot.empty()
        else:
            slot.progress(fraction, text=f"{label}: {message}")

    return update


def run_when_clicked(notice: str, label: str, key: str, **button) -> None:
    """Offer a long job: `notice` (what it costs) and a button; stops the page until the button is clicked,
    then removes both so neither stays on screen while or after the job runs."""
    slot = st.empty()
    with slot.container():
        st.info(notice)
        clicked = st.button(label, key=key, **button)
    if not clicked:
        st.stop()
    slot.empty()


def queue_notice():
    """An `on_wait` callback: tells the user their place in the compute queue."""
    slot = st.empty()

    def on_wait(ahead: int) -> None:
        if ahead:
            slot.info(f"Waiting for the model: {ahead} job(s) ahead of yours.")
        else:
            slot.empty()

    return on_wait


# ----------------------------------------------------------------------------------------------- sidebar
NOT_IN_LINK = ("The address bar is this view's share link, but pasted text is not in it (size, privacy): whoever "
               "opens the link pastes the text again.")


def sidebar() -> None:
    """The controls every page shares. In hosted mode models and datasets come from the lab's list; every
    option is bound to the URL (`bind="query-params"`) so a copied link reopens the same view."""
    ss = st.session_state
    ss.setdefault(K.DOC_SEED, 0)
    cfg = hosting.config()
    with st.sidebar:
        if cfg is not None:
            hosting.sidebar_sources(cfg)
        else:
            st.text_input("Model", value="demo", key=K.MODEL, bind="query-params",
                          help="'demo', a local checkpoint directory, or a Hugging Face Hub id.")
            kind = st.selectbox("Dataset", DATASET_KINDS, key=K.DATASET_KIND, bind="query-params")
            if kind == "file path":
                st.text_input("Dataset file (CSV, Parquet, JSONL)", key=K.DATASET_PATH, bind="query-params")
            elif kind == "upload":
                hosting.uploader("Upload a dataset", hosting.DATASET_TYPES, K.DATASET_UPLOAD)
        mode = st.selectbox("Document", hosting.doc_modes(cfg), key=K.DOC_MODE, bind="query-params")
        if mode == "by index":
            st.number_input("Index in the dataset", min_value=0, value=0, step=1, key=K.DOC_INDEX,
                            bind="query-params")
        elif mode.startswith("random"):
            if st.button("Pick another", help="Draw another document of this kind"):
                ss[K.DOC_SEED] += 1
        elif mode == "pasted text":
            st.text_area("Text to analyse", key=K.PASTED, height=160)
            st.caption(NOT_IN_LINK)
        limit = hosting.max_tokens_limit(cfg)
        st.number_input("Max tokens", min_value=16, max_value=limit, value=None, step=256, key=K.MAX_TOKENS,
                        bind="query-params", placeholder="the model's maximum",
                        help="Inputs are <s> + text truncated to max tokens - 2 + </s>. Empty: the model's maximum "
                             f"when this machine analyses a document that long within {PAGE_BUDGET_S:g} s, else "
                             f"{lv.DEFAULT_MAX_TOKENS:,}; every page says when a text is truncated.")
        st.toggle("Masking also hides numbers", value=cfg is not None and cfg.mask_numbers, key=K.MASK_NUMBERS,
                  bind="query-params",
                  help="Beyond the paper's rule (§3.4, which keeps '7' and '1997': they are alphanumeric). Applies "
                       "wherever a page masks.")
        st.text_input("Extra stopwords", value=", ".join(cfg.extra_stopwords) if cfg is not None else "",
                      key=K.EXTRA_STOPWORDS, bind="query-params", placeholder="e.g. et, al",
                      help="Comma-separated words masked as stopwords too, beyond NLTK's list (the paper's rule "
                           "keeps 'et' and 'al'). Applies wherever a page masks.")


# --------------------------------------------------------------------------------------------- accessors
def current_model() -> lv.LoadedModel:
    source = (st.session_state.get(K.MODEL) or "demo").strip()
    if source == lv.DEMO:
        from longviz_core.demo import ensure_demo

        ensure_demo(progress=progress_bar("Building the offline demo (first run only)"))
    with st.spinner(f"Loading model {source}…"):
        return cache.get_model(source)


def current_dataset(model: lv.LoadedModel):
    """The chosen dataset as a normalised DataFrame, or None when there is none yet."""
    ss = st.session_state
    kind = ss.get(K.DATASET_KIND, "demo")
    if kind == "demo":
        return cache.get_dataset(lv.DEMO, model.id2label)
    if kind == "file path":
        path = (ss.get(K.DATASET_PATH) or "").strip()
        # a hosted dataset may name its text/label columns in the configuration; locally they are detected
        if not path:
            return None
        return cache.get_dataset(path, model.id2label, *hosting.dataset_columns(hosting.config(), path))
    upload = ss.get(K.DATASET_UPLOAD) if hosting.uploads_allowed() else None
    if upload is None:
        return None
    return lv.load_dataset(upload.getvalue(), filename=upload.name, id2label=model.id2label)


def mask_options() -> dict:
    """The sidebar's masking options beyond the paper's rule, as views.masking.build_mask keywords."""
    ss = st.session_state
    words = sorted({w.strip().lower() for w in (ss.get(K.EXTRA_STOPWORDS) or "").split(",") if w.strip()})
    return {"numbers": bool(ss.get(K.MASK_NUMBERS, False)), "extra_stopwords": tuple(words)}


PAGE_BUDGET_S = 15.0  # what a page may spend on one document's analysis and IG's first steps


def default_max_tokens(model: lv.LoadedModel) -> int:
    """The model's maximum when two IG steps and two forwards at that length (more than a page's analysis
    costs) take at most PAGE_BUDGET_S on this machine (timed once per model and length, then cached on
    disk), else DEFAULT_MAX_TOKENS; never above a hosted server's limit."""
    from longviz_core import attribution as attr

    def compute() -> int:
        seconds = attr.estimate_ig_seconds(model, model.max_tokens, 2, on_wait=queue_notice())
        return model.max_tokens if seconds <= PAGE_BUDGET_S else min(lv.DEFAULT_MAX_TOKENS, model.max_tokens)

    fitting = cache.memo(("default_max_tokens", model.fingerprint), compute)
    return min(fitting, hosting.max_tokens_limit(hosting.config()))


def max_tokens(model: lv.LoadedModel) -> int:
    """The sidebar's max tokens, or default_max_tokens when it is left empty."""
    chosen = st.session_state.get(K.MAX_TOKENS)
    return default_max_tokens(model) if chosen is None else int(min(chosen, model.max_tokens))


def attribution_after_click(model: lv.LoadedModel, analysis, steps: int, page: str, label: str, note: str = ""):
    """IG of the predicted class: from the disk cache, or after an honest time estimate and a click on `label`."""
    from longviz_core import attribution as attr
    from longviz_core.progress import format_seconds

    hit = attr.cached_attribution(model, analysis, None, steps)
    if hit is not None:
        return hit
    seconds = attr.estimate_ig_seconds(model, analysis.n, steps, on_wait=queue_notice())
    run_when_clicked(f"Integrated Gradients with {steps} steps on {analysis.n:,} tokens takes about "
                     f"{format_seconds(seconds)} on this machine ({model.device.type}).{note}", label,
                     K.page(page, "run_ig"))
    return attr.integrated_gradients(model, analysis, None, steps, progress=progress_bar("Integrated Gradients"),
                                     on_wait=queue_notice())


@dataclass(frozen=True)
class HeadImportance:
    """The head importance a page scales attention by, and which definition it is (for captions and titles)."""

    values: np.ndarray  # (layers, heads)
    method: str | None  # a key of views.importance.IMPORTANCE_METHODS; None for a file imported on the heatmap page
    name: str  # short, for titles: "Taylor (T3-Vis)"
    description: str  # the definition and its normalisation, for captions

    def settings(self) -> dict:
        """The precompute settings that make a store's head importance this one (for dataset-wide views)."""
        if self.method is None:
            return {"importance_values": self.values}
        return {"importance_method": self.method}


def importance_method(where, page: str) -> str:
    """The head-importance definition picker; T3-Vis's Taylor scores (what the paper used) come first."""
    from longviz_core.views import importance as imp

    return where.selectbox("Head importance definition", list(imp.IMPORTANCE_METHODS),
                           format_func=imp.METHOD_NAMES.get, **K.option(page, "importance_method"),
                           help=" · ".join(imp.IMPORTANCE_METHODS.values()) + ". Computed once per dataset "
                               f"on its first {imp.DEFAULT_EXAMPLES} documents, then read from a result store. "
                               + labels.doc_link("importance"))


def computed_importance(model: lv.LoadedModel, method: str, required: bool = True) -> HeadImportance | None:
    """Head importance by `method` on the current dataset, read from a result store: a precomputed one that serves
    it, else the app's local store (computed there once, with a progress bar). Without a labelled dataset: a
    DatasetError when `required`, else a note and None."""
    from longviz_core.dataset import run
    from longviz_core.views import importance as imp

    df = current_dataset(model)
    if df is None or "label" not in df:
        if required:
            raise lv.DatasetError("Head importance needs a labelled dataset: choose one in the sidebar or untick "
                                  "the scaling.")
        st.info("Head importance needs a labelled dataset: only unscaled rows are shown.")
        return None
    settings = run.clamped(model, lv.PrecomputeSettings(max_tokens=max_tokens(model), importance_method=method))
    store = serving_store(model, df, "head-importance", settings)
    if store is None:
        out = run.local_store_dir(model, df, settings)
        store = lv.ResultStore(out, limit=0) if (out / "manifest.json").is_file() else None
        if store is None or not store.has("head-importance"):  # computed once per dataset and definition, then read
            store = run.local_store(model, df, "head-importance", settings, limit=0,
                                    progress=progress_bar("Head importance"), on_wait=queue_notice())
    return HeadImportance(store.head_importance(), method, imp.METHOD_NAMES[method], imp.IMPORTANCE_METHODS[method])


def imported_importance(model: lv.LoadedModel) -> HeadImportance | None:
    """The head-importance file imported on the heatmap page, when there is one that fits this model."""
    values = st.session_state.get(K.IMPORTED_IMPORTANCE) if hosting.uploads_allowed() else None
    if values is None or values.shape != (model.num_layers, model.num_heads):
        return None
    return HeadImportance(values, None, "imported file", "the file imported on the heatmap page")


def head_importance(model: lv.LoadedModel, page: str, where=st, required: bool = True) -> HeadImportance | None:
    """What an attention page scales heads by: the file imported on the heatmap page when there is one (every
    attention page follows it), else importance computed on the dataset by the definition picked in `where`."""
    imported = imported_importance(model)
    if imported is not None:
        return imported
    return computed_importance(model, importance_method(where, page), required)


def export_settings(model: lv.LoadedModel, description: str, **options) -> dict:
    """What a downloaded file's run metadata records: the document, max tokens and the page's options."""
    return {"document": description, "max_tokens": max_tokens(model), **options}


def serving_store(model: lv.LoadedModel, df, kind: str, settings, only=None):
    """The first precomputed result store (`python -m longviz_core precompute`) found at LONGVIZ_STORE_DIR (a store
    or a folder of stores) for this model, dataset and max tokens that holds `kind` made with `settings`
    (dataset.run.serves_view; `only`: the keys of the kind's settings the view reads); None when there is none."""
    from longviz_core.dataset.run import serves_view

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
    df = current_dataset(model)
    if df is None:
        raise lv.DatasetError("Choose a dataset file (or switch to the demo dataset) in the sidebar.")
    labels = df["label"].to_numpy() if "label" in df else None
    if mode == "by index":
        idx = int(ss.get(K.DOC_INDEX, 0))
        if idx >= len(df):
            raise lv.DatasetError(f"Index {idx} is past the end of the dataset ({len(df)} documents).")
    else:
        probs = dataset_probs(model, df)
        idx = lv.pick_document(probs, labels, mode.replace("random ", ""), positive_class(model), ss[K.DOC_SEED])
        if idx is None:
            raise lv.DatasetError(f"No {mode.replace('random ', '')} in this dataset at these settings.")
    label = int(labels[idx]) if labels is not None else None
    return df["text"].iloc[idx], label, f"document {idx} ({mode})"


def current_analysis():
    """(model, analysis, true label or None, description) of the current document."""
    model = current_model()
    text, label, description = current_document(model)
    analysis = cache.get_analysis(model, text, max_tokens(model), on_wait=queue_notice())
    enc = analysis.encoded
    if enc.truncated:  # on every page: each number below is about the first part of the text only
        st.warning(f"Truncated to {enc.n - 2:,} of {enc.n_text_tokens_original:,} text tokens (max tokens = "
                   f"{enc.max_tokens:,}, including <s> and </s>; the model allows {model.max_tokens:,}).")
    return model, analysis, label, description
