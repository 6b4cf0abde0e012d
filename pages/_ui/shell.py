"""The page shell: the error guard every page runs in, the hand-over to app.py, tables, metric styling, progress
bars, the queue notice and the click that starts a long job (widgets only; no computation)."""
from __future__ import annotations

import logging
import traceback
from contextlib import contextmanager

import streamlit as st

import longviz_core as lv
from longviz_core.runtime import waiting_notice
from pages._ui import export

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


@contextmanager
def queue_notice():
    """Heavy work inside the block tells the user their place in the compute queue, in a slot placed here."""
    slot = st.empty()

    def on_wait(ahead: int) -> None:
        if ahead:
            slot.info(f"Waiting for the model: {ahead} job(s) ahead of yours.")
        else:
            slot.empty()

    with waiting_notice(on_wait):
        yield


def queued(compute):
    """`compute` run inside queue_notice when called: for cache.derived's computations, which run on a miss only."""
    def run(*args, **kwargs):
        with queue_notice():
            return compute(*args, **kwargs)

    return run
