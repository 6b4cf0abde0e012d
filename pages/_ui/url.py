"""Values read from the address bar: one parser per type, each accepting only what the app can use; a value it
refuses is dropped from the URL with a notice, so a bad link never breaks a page (on this run or the next).

`sweep()` runs first on every run, before any widget seeds itself from the URL: it drops every value no parser
would accept (Streamlit's own seeding raises on some, e.g. `?doc_index=1e400`), then pages read their own
parameters with `url_int` / `url_text`.
"""
from __future__ import annotations

import re

import streamlit as st

from longviz_core.model.segments import UNITS
from pages._ui.keys import K

MAX_LENGTH = 1000  # longer than any path, class name or option label the app offers
_DIGITS = re.compile(r"[0-9]{1,15}")  # ASCII only: "²", "٣" and "３" are digits to str.isdigit, not to the app
_NUMBER = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# free text: a model (a path or a configured name), a dataset, stopwords, a class name
TEXT_KEYS = frozenset({K.MODEL, K.DATASET_PATH, K.EXTRA_STOPWORDS, "target"})
INT_KEYS = frozenset({"seed", "token"})  # whole numbers read by the app itself (pages/_ui/links.py, state.py)
# a closed set of values, the first the default: anything else is dropped, so the widget shows its default
OPTION_KEYS = {K.UNIT: UNITS}
# links made before the sidebar's Unit: the overlay pages' own "Show: tokens | words" (a radio carries its label)
OLD_UNIT_KEYS = (K.page("attribution", "unit"), K.page("overlay", "unit"))
_OLD_UNITS = {"tokens": "token", "words": "word"}


def url_int(raw, lo: int = 0, hi: int | None = None) -> int | None:
    """`raw` as a whole number in [lo, hi] when it is one written in ASCII digits, else None."""
    if not isinstance(raw, str) or not _DIGITS.fullmatch(raw):
        return None
    value = int(raw)
    return value if value >= lo and (hi is None or value <= hi) else None


def url_text(raw) -> str | None:
    """`raw` when it is text the app can use (not too long, no control characters), else None."""
    if not isinstance(raw, str) or len(raw) > MAX_LENGTH or _CONTROL.search(raw):
        return None
    return raw


def url_option(raw) -> str | None:
    """A widget's value from the URL (an option's label, a number, true/false): text the app can use, without
    digits other than ASCII 0-9, that, if Python would read it as a number, is a plain decimal one (no "inf",
    "nan", "1e400", "1_0", " 5")."""
    text = url_text(raw)
    if text is None or any(ch.isnumeric() and not "0" <= ch <= "9" for ch in text):  # no option is spelt "²"
        return None
    try:
        float(text)
    except ValueError:
        return text
    return text if _NUMBER.fullmatch(text) else None


def usable(key: str, raw) -> bool:
    """Whether the URL value `raw` of parameter `key` passes the parser of its type."""
    if key in OPTION_KEYS:
        return raw in OPTION_KEYS[key]
    if key in INT_KEYS:
        return url_int(raw) is not None
    return (url_text if key in TEXT_KEYS else url_option)(raw) is not None


def drop(key: str, raw, why: str = "not a value this page can use") -> None:
    """Remove parameter `key` from the URL and say so."""
    st.query_params.pop(key, None)
    _forget_initial(key)
    shown = raw if isinstance(raw, str) and len(raw) <= 40 else f"{str(raw)[:40]}…"
    st.toast(f"The link's {inert(key)}={inert(repr(shown))} was ignored: {why}.", icon=":material/link_off:")


def inert(text: str) -> str:
    """`text` shown as typed in Markdown: every ASCII punctuation character backslash-escaped, so a link's value
    cannot become a link, an image, emphasis or LaTeX in the notice."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def sweep() -> None:
    """Drop every URL value its type's parser refuses (all values of a repeated parameter are checked)."""
    _old_unit_links()
    for key in list(st.query_params):
        values = st.query_params.get_all(key)
        kept = [v for v in values if usable(key, v)]
        if len(kept) == len(values):
            continue
        bad = next(v for v in values if not usable(key, v))
        options = OPTION_KEYS.get(key)
        drop(key, bad, *([f"it is one of {', '.join(options)}; showing {options[0]} instead"] if options else []))
        if kept:
            st.query_params[key] = kept if len(kept) > 1 else kept[0]


def _old_unit_links() -> None:
    """A link to an overlay page's own unit (`attribution.unit=words`, before the sidebar's Unit) opens that
    unit in the sidebar, unless the link names one there too; the old parameter leaves the URL."""
    for key in OLD_UNIT_KEYS:
        raw = st.query_params.get(key)
        if raw is None:
            continue
        st.query_params.pop(key, None)
        _forget_initial(key)
        if raw in _OLD_UNITS and K.UNIT not in st.query_params:
            st.session_state.setdefault(K.UNIT, _OLD_UNITS[raw])


def _forget_initial(key: str) -> None:
    """Widgets seed themselves from the URL as the session opened it (Streamlit keeps that copy apart from
    st.query_params), so a dropped value is removed from that copy too, or the widget would still read it."""
    from streamlit.runtime.state.session_state_proxy import get_session_state

    with get_session_state().query_params() as qp:
        getattr(qp, "_initial_query_params", {}).pop(key, None)
