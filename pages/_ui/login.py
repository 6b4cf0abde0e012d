"""The login gate of a hosted app: OIDC with an allowlist, or the lab's password, from .streamlit/secrets.toml."""
from __future__ import annotations

import hmac
import time

import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError

from longviz_core.config import HostConfig
from pages._ui.hosting import config
from pages._ui.keys import K


def login_gate() -> None:
    """Stop the page until the user is signed in (hosted mode with [login] mode = oidc or password)."""
    cfg = config()
    if cfg is None or cfg.auth.mode == "none":
        return
    if cfg.auth.mode == "oidc":
        _oidc_gate(cfg)
    else:
        _password_gate()


def _oidc_gate(cfg: HostConfig) -> None:
    if not _secrets("auth"):
        st.error("Login is set to OIDC but .streamlit/secrets.toml has no [auth] section "
                 "(see docs/secrets.example.toml). The app stays closed.")
        st.stop()
    if not st.user.is_logged_in:
        st.title("longviz")
        st.write("This longviz server is private to the lab. Sign in to continue.")
        if st.button("Log in", type="primary"):
            st.login(cfg.auth.provider)
        st.stop()
    email = st.user.get("email")
    if not cfg.auth.allows(email):
        st.error(f"{email or 'This account'} is not allowed on this server. Ask the lab's admin, or sign out "
                 "and use another account.")
        st.button("Log out", on_click=st.logout)
        st.stop()
    with st.sidebar:
        st.caption(f"Signed in as {email or st.user.get('name', 'unknown')}")
        st.button("Log out", on_click=st.logout)


def _password_gate() -> None:
    ss = st.session_state
    if ss.get(K.page("login", "password_ok")):
        return
    expected = _secrets("longviz").get("password")
    if not expected:
        st.error("Login is set to password but .streamlit/secrets.toml has no [longviz] password "
                 "(see docs/secrets.example.toml). The app stays closed.")
        st.stop()
    st.title("longviz")
    with st.form(K.page("login", "form")):
        entered = st.text_input("Lab password", type="password", key=K.page("login", "password"))
        submitted = st.form_submit_button("Enter", type="primary")
    if submitted:
        if hmac.compare_digest(entered.encode("utf-8"), str(expected).encode("utf-8")):
            ss[K.page("login", "password_ok")] = True
            st.rerun()
        time.sleep(1.0)  # slows guessing down; a session cannot submit faster than it reruns
        st.error("Wrong password.")
    st.stop()


def _secrets(section: str) -> dict:
    """A section of secrets.toml; empty when the file or the section is missing (the gates then stay shut)."""
    try:
        return dict(st.secrets.get(section) or {})
    except (FileNotFoundError, StreamlitSecretNotFoundError):
        return {}
