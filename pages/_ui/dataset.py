"""The "compute for the dataset" flow every dataset-wide view shares. A view reads a result store: a precomputed
one (LONGVIZ_STORE_DIR) when it serves the view's settings, else the app's local store for this model, dataset and
settings, computed by the same precompute as the command line for the first N documents the user picks: on a
click, with a progress bar (documents done / total, time left), resumable and stoppable. Pages turn the store into
numbers only through its aggregation methods."""
from __future__ import annotations

import streamlit as st

import longviz_core as lv
from longviz_core import cache
from longviz_core.dataset import run, stores
from longviz_core.progress import format_seconds
from pages._ui import current, shell
from pages._ui.keys import K

KEEPS = ("Every document is written to the store as soon as it is done, so stopping (or a rerun of the page, or a "
         "closed tab) loses only the document in flight; computing again goes on from there.")


def store_view(store: lv.ResultStore, view: str, compute, *parts):
    """`compute()`, a store's aggregation for a view, kept once per store (folder and content) and the view's own
    `parts` (hashable settings, never arrays)."""
    return cache.memo((view, str(store.root), store.content_key(), *parts), compute)


def settings(model: lv.LoadedModel, **options) -> lv.PrecomputeSettings:
    """A view's precompute settings: its options over the defaults, at the sidebar's max tokens."""
    return run.clamped(model, lv.PrecomputeSettings(max_tokens=current.max_tokens(model), **options))


def store(model: lv.LoadedModel, df, page: str, kind: str, settings: lv.PrecomputeSettings, label: str,
          only=None, default_docs: int = 10) -> lv.ResultStore:
    """The store a dataset-wide view of `kind` reads, and a caption saying which and how many documents it holds.
    A precomputed store that serves the view is read as it is; otherwise the local store on the first N documents
    (a slider), computed on a click of `label`. Stops the page until the store holds at least one document."""
    found = current.serving_store(model, df, kind, settings, only)
    if found is not None:
        st.caption(f"Precomputed: {found.count(kind)} of {len(df)} documents, read from the result store "
                   f"{found.root}.")
        return found
    n = st.slider("Documents (from the start of the dataset)", 1, len(df), min(default_docs, len(df)),
                  **K.option(page, "docs"))
    out = stores.local_store_dir(model, df, settings)
    local = _open(out, n)
    done = run.documents_done(local, df, kind, settings)
    running, wanted = K.page(page, "ds_running"), repr((str(out), n))
    if done < n and st.session_state.get(running) == wanted:
        stop = st.empty()  # cleared when the run ends: a Stop left under finished results would stop nothing
        if stop.button("Stop", key=K.page(page, "ds_stop"), help=KEEPS):
            st.session_state.pop(running)
            st.info("Stopped: the documents finished so far are kept.")
        else:
            with shell.guard():
                _compute(model, df, out, kind, settings, n, label, running)
            stop.empty()
            local = _open(out, n)
            done = run.documents_done(local, df, kind, settings)
    if done < n and st.session_state.get(running) != wanted:
        st.info(f"{done} of the first {n} documents are computed for these settings. "
                f"{_time_left(model, df, out, kind, settings, n - done)} {KEEPS}")
        if st.button(label if not done else f"{label} (continue)", type="primary", key=K.page(page, "run_dataset")):
            st.session_state[running] = wanted
            st.rerun()
    if local is None or local.count(kind) == 0:
        st.stop()
    st.caption(f"Computed in the app: {local.count(kind)} of the first {n} documents ({len(df)} in the dataset), "
               f"read from the local result store {out}.")
    return local


def _time_left(model, df, out, kind, settings, left: int) -> str:
    """What the other documents will take: from the seconds measured per document in this store, else (before
    its first document) Integrated Gradients' estimate at max tokens when the view needs IG (the attribution kinds,
    a leaderboard that scores IG)."""
    from longviz_core.attribution import estimate_ig_seconds

    kinds = run.run_kinds(df, kind, settings)
    per_doc = stores.seconds_per_document(out, kinds) if (out / "log").is_dir() else None
    if per_doc:
        return (f"The other {left} take about {format_seconds(per_doc * left)} ({format_seconds(per_doc)} per "
                "document measured so far).")
    leaderboard_ig = "leaderboard" in kinds and "ig" in (settings.explainers or ("ig",))  # None: every explainer
    if "attribution" in kinds or leaderboard_ig:
        with shell.queue_notice():
            ig = estimate_ig_seconds(model, settings.max_tokens, settings.n_steps, settings.precision)
        return (f"Integrated Gradients alone takes up to about {format_seconds(ig * left)} for the other {left} "
                f"at {settings.max_tokens:,} tokens; the progress bar shows the time left as documents finish.")
    return "The progress bar shows the time left as documents finish."


def _open(out, n: int) -> lv.ResultStore | None:
    return lv.ResultStore(out, limit=n) if (out / "manifest.json").is_file() else None


def _compute(model, df, out, kind, settings, n, label, running) -> None:
    """The precompute into the local store. A Streamlit rerun or stop (the Stop button, another widget, a closed
    tab) interrupts it at its next progress report, so the document in flight is committed or dropped whole, and
    the run goes on at the next rerun with the same settings; an error ends it (and is shown by the guard)."""
    bar = shell.progress_bar(label)
    bar(0.0, f"{n} documents")
    try:
        with shell.queue_notice():
            run.precompute(model, df, out, kind, settings, limit=n, progress=bar, use_cache=True, wait=True)
    except Exception:
        st.session_state.pop(running, None)
        raise
    st.session_state.pop(running, None)
