"""Hosted mode in the app: the lab's configuration, the login gate and the list-only sidebar choices.

app.py calls `apply_host_config()` and `login_gate()` before the sidebar; `sidebar.sidebar()` calls
`sidebar_sources()` instead of its free-text model and dataset widgets when `config()` is not None.
In local mode (no configuration) every function here is a no-op and the app behaves as before.
"""
from __future__ import annotations

import hmac
import os
import sys
import time

import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError

import longviz_core as lv
from longviz_core import cache
from longviz_core.config import ConfigError, HostConfig, config_path, load_config
from pages._ui.keys import DOC_MODES, K

DATASET_TYPES = ["csv", "tsv", "parquet", "jsonl", "json"]


@st.cache_resource(show_spinner=False, max_entries=4)
def _load(path: str, mtime: float) -> HostConfig:
    return load_config(path)  # keyed on mtime: an edited file is re-read on the next run


def config() -> HostConfig | None:
    """The process's hosting configuration; None in local mode. An invalid file stops the app with its
    message: a broken configuration must never fall back to local mode (free model paths)."""
    try:
        path = config_path(sys.argv[1:], os.environ)
        if path is None:
            return None
        return _load(str(path), os.path.getmtime(path) if os.path.exists(path) else 0.0)
    except ConfigError as exc:
        st.error(f"The hosting configuration is invalid: {exc}")
        st.stop()


def apply_host_config() -> HostConfig | None:
    """Point the core's caches at the configured directories and memory budget (idempotent, every run)."""
    cfg = config()
    if cfg is None:
        return None
    os.environ.update(cfg.environment())
    # The per-process tensor cache may exist already (created on an earlier run): resize it in place.
    cache.memory_cache().max_bytes = cfg.memory_mb * 2**20
    return cfg


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


# ------------------------------------------------------------------------------------------- uploads
def uploads_allowed() -> bool:
    """Whether a user's files may enter the server: always locally, only with `allow_upload = true` hosted."""
    cfg = config()
    return cfg is None or cfg.allow_upload


def uploader(label: str, types: list[str], key: str):
    """The one door for a user's file (a dataset, a head-importance file): st.file_uploader when uploads are
    allowed, else no widget and None, whatever a link or the session holds."""
    if not uploads_allowed():
        st.session_state.pop(key, None)
        return None
    return st.file_uploader(label, type=types, key=key)


# ------------------------------------------------------------------------------------------- sidebar
def sidebar_sources(cfg: HostConfig) -> None:
    """Model and dataset chosen by name from the configuration (inside `with st.sidebar`).

    The selectboxes store the *source* under the usual keys (K.MODEL, K.DATASET_PATH with K.DATASET_KIND =
    "file path"), so `current.current_model()` / `current_dataset()` work unchanged; a value outside the
    lists cannot be chosen."""
    ss = st.session_state
    models = {m.source: m.name for m in cfg.models}
    # Bound to the URL by *name* (the selectbox's label): links never carry server paths, and a name that
    # is not in the list is dropped by Streamlit before it reaches the session.
    st.selectbox("Model", list(models), format_func=models.get, key=K.MODEL, bind="query-params",
                 help=_descriptions(cfg.models))
    datasets = {d.source: d.name for d in cfg.datasets}
    if cfg.allow_upload:
        datasets["upload"] = "Upload a file…"
    if datasets:
        choice = st.selectbox("Dataset", list(datasets), format_func=datasets.get, key=K.DATASET_PATH,
                              bind="query-params", help=_descriptions(cfg.datasets))
        ss[K.DATASET_KIND] = "upload" if choice == "upload" else "file path"
        if choice == "upload":
            uploader("Upload a dataset", DATASET_TYPES, K.DATASET_UPLOAD)


def doc_modes(cfg: HostConfig | None) -> tuple[str, ...]:
    """The document choices offered: all of them locally; hosted mode may forbid pasted text, and without
    any dataset only pasted text remains."""
    if cfg is None:
        return DOC_MODES
    modes = DOC_MODES if cfg.datasets or cfg.allow_upload else ("pasted text",)
    return tuple(m for m in modes if m != "pasted text" or cfg.allow_pasted_text)


def max_tokens_limit(cfg: HostConfig | None) -> int:
    """Ceiling of the "Max tokens" control."""
    return cfg.max_tokens if cfg is not None else 16384


def max_ig_steps(cfg: HostConfig | None, local_limit: int) -> int:
    """Ceiling of an Integrated Gradients steps control: the configuration's in hosted mode, the page's own
    `local_limit` locally. Pages also drop step presets above it."""
    return cfg.max_ig_steps if cfg is not None else local_limit


def dataset_columns(cfg: HostConfig | None, source: str) -> tuple[str | None, str | None]:
    """(text_column, label_column) configured for a dataset source; (None, None) = detect."""
    for d in cfg.datasets if cfg is not None else ():
        if d.source == source:
            return d.text_column, d.label_column
    return None, None


def display_name(model: lv.LoadedModel) -> str:
    """What exports and links call the model: its configured name in hosted mode, its source locally."""
    cfg = config()
    if cfg is not None:
        for m in cfg.models:
            if m.source == model.source:
                return m.name
    return model.source


def _descriptions(choices) -> str | None:
    lines = [f"**{c.name}**: {c.description}" for c in choices if c.description]
    return "\n\n".join(lines) or None
