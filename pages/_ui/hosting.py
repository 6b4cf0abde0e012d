"""Hosted mode in the app: the lab's configuration and what it offers a session — models, datasets, uploads, the
dataset scopes — with the list-only sidebar choices (the login gate: login.py).

app.py calls `apply_host_config()` and `login.login_gate()` before the sidebar; `sidebar.sidebar()` calls
`sidebar_sources()` instead of its free-text model and dataset widgets when `config()` is not None. Every page
and scope asks the offer here (`model_source`, `dataset_source`, `datasets_offered`, `scope`), never the session
or the URL directly: hosted, only what the configuration lists is used, whatever a link or the session holds.
In local mode (no configuration) everything is offered and the app behaves as before.
"""
from __future__ import annotations

import os
import sys

import streamlit as st

import longviz_core as lv
from longviz_core import cache
from longviz_core.config import ConfigError, HostConfig, config_path, load_config
from pages._ui.keys import DOC_MODES, K
from pages._ui.url import drop

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


# ------------------------------------------------------------------------------------------- the offer
DATASET_SCOPE = "dataset"  # the option of a page's scope radio that reads the dataset
NO_DATASET = "this server offers no dataset (its configuration lists none)"


def model_source(chosen: str | None) -> str:
    """The model to load for the session's choice: locally `chosen` (the demo when empty); hosted, `chosen` when
    the configuration lists it, else the configuration's first model."""
    chosen = (chosen or "").strip()
    cfg = config()
    if cfg is None:
        return chosen or lv.DEMO
    sources = [m.source for m in cfg.models]
    return chosen if chosen in sources else sources[0]


def dataset_source(kind: str | None, path: str | None) -> tuple[str, str] | None:
    """(kind, source) of the dataset to read for the session's choice — ("demo", "demo"), ("file path", path) or
    ("upload", "") — or None when there is none to read. Locally as chosen (the demo when nothing is); hosted,
    a dataset the configuration lists, or an upload with allow_upload, else None: never a dataset the
    configuration does not list (not the demo either)."""
    path = (path or "").strip()
    cfg = config()
    if cfg is None:
        kind = kind or "demo"
        if kind == "demo":
            return "demo", lv.DEMO
        if kind == "file path":
            return ("file path", path) if path else None
        return "upload", ""
    if path in {d.source for d in cfg.datasets}:
        return "file path", path
    return ("upload", "") if path == "upload" and cfg.allow_upload else None


def datasets_offered() -> bool:
    """Whether this session may read any dataset: always locally; hosted, when the configuration lists one or
    allows uploads."""
    cfg = config()
    return cfg is None or bool(cfg.datasets) or cfg.allow_upload


def dataset_needed(what: str, verb: str = "needs") -> str:
    """The message when `what` needs a dataset and the session reads none: where a dataset is offered, to choose
    one in the sidebar; else that this server offers none (no choice in the sidebar can help)."""
    if datasets_offered():
        return f"{what} {verb} a dataset: choose one in the sidebar."
    return f"{what} {verb} a dataset, and {NO_DATASET}: ask the server's admin to add one ([[datasets]])."


def scope(where, label: str, options: tuple[str, ...], page: str, name: str = "scope", **kwargs) -> str:
    """A page's scope radio, bound to the URL as `page.name`: its dataset option only where a dataset is offered.
    Without one a caption says so, and a link or a session asking for the dataset scope is given this document's
    scope, with a notice."""
    offered = options if datasets_offered() else tuple(o for o in options if o != DATASET_SCOPE)
    key = K.page(page, name)
    if offered != options:
        raw = st.query_params.get(key)
        if raw is not None and raw not in offered:
            drop(key, raw, NO_DATASET)
        if key in st.session_state and st.session_state[key] not in offered:
            del st.session_state[key]
    choice = where.radio(label, offered, **K.option(page, name), **kwargs)
    if offered != options:
        where.caption(f"Only this document: {NO_DATASET}.")
    return choice


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
