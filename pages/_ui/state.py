"""Page state that follows the document: the class an explanation is for and the selected token reset when the
document changes (unless the class is pinned), the address bar carries both (`target` = the class's name,
`token` = a position) so a copied link reopens them, and the token tables and the clickable overlay share one
selection.
"""
from __future__ import annotations

import streamlit as st

from pages._ui.keys import K
from pages._ui.url import drop, url_int

TARGET_PARAM, TOKEN_PARAM = "target", "token"


def new_document(page: str, analysis) -> bool:
    """Whether `analysis` (document, model and max tokens) differs from the one of this page's last run; False
    on the page's first run in the session, whose values come from a link or the defaults. A new document
    drops the selected token at once (session and address bar), so a page that stops before drawing the
    token box (waiting for a click) cannot bring the old position back from the link later."""
    key = K.page(page, "document")
    last = st.session_state.get(key)
    st.session_state[key] = analysis.key
    changed = last is not None and last != analysis.key
    if changed:
        st.session_state.pop(K.page(page, "pos"), None)
        st.query_params.pop(TOKEN_PARAM, None)
    return changed


def class_target(where, page: str, analysis, changed: bool, help: str = "") -> int:
    """The class explained: the predicted class unless the user picks another; back to the predicted class on
    a new document unless "Pin" is ticked; a link's `target` (a class name) on the page's first run."""
    ss = st.session_state
    key, pin = K.page(page, "target"), K.page(page, "pin_target")
    names = [analysis.label_name(i) for i in range(len(analysis.probs))]
    if key not in ss:
        linked = st.query_params.get(TARGET_PARAM)
        ss[key] = names.index(linked) if linked in names else analysis.predicted
        if linked is not None and linked not in names:
            drop(TARGET_PARAM, linked, f"this model's classes are {', '.join(names)}")
    elif (changed and not ss.get(pin)) or not 0 <= ss[key] < len(names):
        ss[key] = analysis.predicted
    target = where.selectbox("Attribution label (class explained)", range(len(names)), format_func=names.__getitem__,
                             key=key, help=help)
    where.checkbox("Pin the class", key=pin,  # short: the column is narrow at 1,024 px
                   help="Keep this class across documents. Unticked, a new document starts from its predicted class.")
    st.query_params[TARGET_PARAM] = names[target]
    return int(target)


def selected_token(where, page: str, n: int, default: int) -> int:
    """The selected token position, one state for the number box, the token tables and the overlay's outline:
    `default` (the top token) on a new document (see new_document), a link's `token` when the page opens with
    one, kept otherwise."""
    ss = st.session_state
    key = K.page(page, "pos")
    if key not in ss:
        linked = st.query_params.get(TOKEN_PARAM)
        position = url_int(linked, 0, n - 1)
        ss[key] = default if position is None else position
        if linked is not None and position is None:
            drop(TOKEN_PARAM, linked, f"this document's positions are 0..{n - 1}")
    elif not 0 <= ss[key] < n:
        ss[key] = default
    pos = int(where.number_input("Token position (or click a token or a table row)", 0, n - 1, key=key))
    st.query_params[TOKEN_PARAM] = str(pos)
    return pos


def pick(page: str, position: int) -> None:
    """Select `position` (the callback of a table row or of a token clicked in the overlay)."""
    st.session_state[K.page(page, "pos")] = int(position)


def table_selection(key: str, positions, selected: int) -> None:
    """Show `selected` as the selected row of the selectable table `key` (its rows are token `positions`), so
    the table agrees with the number box and the overlay after any change (mask toggle, another pick)."""
    rows = [i for i, p in enumerate(positions) if int(p) == selected]
    st.session_state[key] = {"selection": {"rows": rows, "columns": [], "cells": []}}
