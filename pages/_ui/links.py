"""Shareable links: the address bar always holds the current view, so a copied URL reopens it.

- The page is the URL path (st.navigation's `url_path`, e.g. /attribution).
- Every option widget carries itself: it is created with `bind="query-params"` and its key, so Streamlit
  writes its value into the URL when it differs from the default and seeds it back when a link is opened.
  Values a widget would not accept (an option not in the list, a number out of range, a model name a hosted
  server does not offer) are dropped by Streamlit before they reach the session. Selectboxes carry their
  *label*, so hosted links name models and datasets, never server paths.
- State that is not a widget value goes through `sync()`: the seed of the random document picks.
- Before any of it, `pages/_ui/url.py` drops every URL value its type's parser refuses, with a notice.
Pasted text and uploads never enter the URL (size, privacy).
"""
from __future__ import annotations

import streamlit as st

from pages._ui.keys import K
from pages._ui.url import drop, url_int

SEED = "seed"  # query parameter of K.DOC_SEED
_MAX_SEED = 10**9


def sync() -> None:
    """Adopt a link's seed on the session's first run, then keep the URL in step with the session.

    Call on every run after the sidebar (whose "Pick another" button changes the seed) and before the page
    runs (which reads it)."""
    ss = st.session_state
    first_run = K.page("links", "restored")
    if not ss.get(first_run):
        ss[first_run] = True
        raw = st.query_params.get(SEED)
        seed = url_int(raw, 0, _MAX_SEED - 1)
        if seed is not None:
            ss[K.DOC_SEED] = seed
        elif raw is not None:
            drop(SEED, raw, f"a seed is a whole number below {_MAX_SEED:,}")
    seed = int(ss.get(K.DOC_SEED, 0))
    if seed:
        if st.query_params.get(SEED) != str(seed):
            st.query_params[SEED] = str(seed)
    elif SEED in st.query_params:
        del st.query_params[SEED]
