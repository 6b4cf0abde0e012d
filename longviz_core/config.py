"""Hosted mode: a lab's TOML file fixes what remote users may choose and how much the server spends.

Without a file longviz runs in local mode (any model path, uploads). With one, users pick models and datasets by
*name* from the file's lists, so nobody types a server path into a browser. See docs/longviz.example.toml for
every key; `load_config` rejects unknown keys (a typo must not silently fall back to a default).

The file is found through `streamlit run app.py -- --config F` or the environment variable LONGVIZ_CONFIG.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ._disk import METADATA_BYTES, read_file
from .errors import LongvizError

ENV_VAR = "LONGVIZ_CONFIG"
AUTH_MODES = ("none", "oidc", "password")
DEMO = "demo"  # the demo dataset, and the Longformer demo model
DEMO_MODELS = (DEMO, "demo-modernbert", "demo-decoder")  # the shipped demo models (demo/shipped.py)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Limits that keep a typo (max_tokens = 409600) from taking a shared server down.
_MAX_TOKENS_RANGE = (16, 65_536)
_IG_STEPS_RANGE = (2, 5_000)  # captum needs 2; 5,000 is the local pages' own ceiling


class ConfigError(LongvizError):
    """The hosting configuration file is missing, unreadable or invalid."""


@dataclass(frozen=True)
class ModelChoice:
    name: str  # what users see and what links carry
    source: str  # one of DEMO_MODELS, an absolute checkpoint directory, or a Hub id
    description: str = ""


@dataclass(frozen=True)
class DatasetChoice:
    name: str
    source: str  # "demo" or an absolute CSV / TSV / Parquet / JSONL path
    text_column: str | None = None
    label_column: str | None = None
    description: str = ""


@dataclass(frozen=True)
class AuthConfig:
    mode: str = "none"  # "none" | "oidc" (st.login) | "password" (shared password in secrets.toml)
    provider: str | None = None  # named provider of secrets.toml [auth.<provider>]; None = the [auth] section
    allowed_emails: tuple[str, ...] = ()  # oidc: lower-case addresses let in; empty = any signed-in user
    allowed_domains: tuple[str, ...] = ()  # oidc: e-mail domains let in

    def allows(self, email: str | None) -> bool:
        """Whether a signed-in user's e-mail passes the allow lists (always true without lists)."""
        if not self.allowed_emails and not self.allowed_domains:
            return True
        email = (email or "").strip().lower()
        return email in self.allowed_emails or email.rpartition("@")[2] in self.allowed_domains


@dataclass(frozen=True)
class HostConfig:
    path: Path  # the file it was read from
    models: tuple[ModelChoice, ...]  # at least one; the first is the default
    datasets: tuple[DatasetChoice, ...]  # may be empty: then only pasted text
    max_tokens: int  # ceiling of the "Max tokens" control
    max_ig_steps: int  # ceiling of Integrated Gradients steps
    memory_mb: int  # budget for cached tensors (LONGVIZ_CACHE_MEMORY_MB)
    cache_dir: Path | None  # LONGVIZ_CACHE_DIR (demo, disk caches); None keeps the environment's
    store_dir: Path | None  # LONGVIZ_STORE_DIR (precomputed dataset results); None keeps the environment's
    allow_upload: bool  # may users upload their own dataset file?
    allow_pasted_text: bool  # may users paste a text?
    auth: AuthConfig
    mask_numbers: bool = False  # the sidebar's "Masking also hides numbers" starts on
    extra_stopwords: tuple[str, ...] = ()  # the sidebar's extra stopwords start with these words

    def model(self, name: str) -> ModelChoice:
        for m in self.models:
            if m.name == name:
                return m
        raise ConfigError(f"No model named '{name}'. Choices: {', '.join(m.name for m in self.models)}.")

    def dataset(self, name: str) -> DatasetChoice:
        for d in self.datasets:
            if d.name == name:
                return d
        raise ConfigError(f"No dataset named '{name}'. Choices: {', '.join(d.name for d in self.datasets)}.")

    def environment(self) -> dict[str, str]:
        """The environment variables through which the rest of the core reads these settings."""
        env = {"LONGVIZ_CACHE_MEMORY_MB": str(self.memory_mb)}
        if self.cache_dir is not None:
            env["LONGVIZ_CACHE_DIR"] = str(self.cache_dir)
        if self.store_dir is not None:
            env["LONGVIZ_STORE_DIR"] = str(self.store_dir)
        return env


def config_path(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The file named by `--config F` / `--config=F` in argv, else by $LONGVIZ_CONFIG; None = local mode."""
    path = None
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--config":
            if i + 1 >= len(args) or not args[i + 1].strip():
                raise ConfigError("--config needs a file: streamlit run app.py -- --config /path/longviz.toml")
            path = args[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
            if not path.strip():
                raise ConfigError("--config= needs a file: streamlit run app.py -- --config=/path/longviz.toml")
    return path if path is not None else ((environ.get(ENV_VAR) or "").strip() or None)


def from_argv_or_env(argv: Sequence[str], environ: Mapping[str, str]) -> HostConfig | None:
    """The hosted configuration named on the command line or in the environment; None in local mode."""
    path = config_path(argv, environ)
    return load_config(path) if path is not None else None


def load_config(path: str | os.PathLike) -> HostConfig:
    """Read and validate a hosting configuration; every problem is a ConfigError naming the key."""
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(read_file(p, f"The configuration '{p}'", METADATA_BYTES, ConfigError,
                                       fix="give --config a TOML file").decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"No configuration file at '{p}'.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"'{p}' is not UTF-8 text.") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"'{p}' is not valid TOML: {exc}") from exc
    return _parse(data, p.resolve())


def _parse(data: dict, path: Path) -> HostConfig:
    _only(data, {"server", "login", "models", "datasets"}, "the top level")
    server = _table(data, "server")
    _only(server, {"max_tokens", "max_ig_steps", "memory_mb", "cache_dir", "store_dir", "allow_upload",
                   "allow_pasted_text", "mask_numbers", "extra_stopwords"}, "[server]")
    base = path.parent
    models = tuple(_model(entry, i, base) for i, entry in enumerate(_array(data, "models")))
    if not models:
        raise ConfigError(f"'{path}' lists no models: add at least one [[models]] entry with name and source.")
    datasets = tuple(_dataset(entry, i, base) for i, entry in enumerate(_array(data, "datasets")))
    for kind, items in (("model", models), ("dataset", datasets)):
        names = [x.name for x in items]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"Two {kind}s are named '{dup[0]}': names must be unique (links carry them).")
    cfg = HostConfig(
        path=path,
        models=models,
        datasets=datasets,
        max_tokens=_int(server, "max_tokens", 4096, _MAX_TOKENS_RANGE, "[server]"),
        max_ig_steps=_int(server, "max_ig_steps", 64, _IG_STEPS_RANGE, "[server]"),
        memory_mb=_int(server, "memory_mb", 4096, (64, 10**7), "[server]"),
        cache_dir=_dir(server, "cache_dir", base),
        store_dir=_dir(server, "store_dir", base),
        allow_upload=_bool(server, "allow_upload", False, "[server]"),
        allow_pasted_text=_bool(server, "allow_pasted_text", True, "[server]"),
        auth=_auth(_table(data, "login")),
        mask_numbers=_bool(server, "mask_numbers", False, "[server]"),
        extra_stopwords=_words(server, "extra_stopwords", "[server]"),
    )
    if not (cfg.datasets or cfg.allow_upload or cfg.allow_pasted_text):
        raise ConfigError(f"'{path}' offers nothing to analyse: no [[datasets]] entry, allow_upload = false and "
                          "allow_pasted_text = false. List a dataset, or allow pasted text or uploads.")
    return cfg


def _model(entry, i: int, base: Path) -> ModelChoice:
    where = f"[[models]] entry {i + 1}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table with name and source.")
    _only(entry, {"name", "source", "description"}, where)
    name = _str(entry, "name", where)
    source = _str(entry, "source", f"{where} ('{name}')")
    if source not in DEMO_MODELS:
        source = _model_source(source, base, f"model '{name}'")
    return ModelChoice(name=name, source=source, description=str(entry.get("description", "")))


def _model_source(source: str, base: Path, what: str) -> str:
    if source.startswith(("/", ".", "~")) or (base / source).exists():
        p = _path(source, base)
        if not (p / "config.json").is_file():
            raise ConfigError(f"{what}: no checkpoint at '{p}' (a directory with config.json is expected).")
        return str(p)
    if not _HUB_ID.match(source):
        raise ConfigError(
            f"{what}: '{source}' is neither a checkpoint directory nor a Hub id (owner/name). "
            "Write relative paths as ./dir."
        )
    return source


def _dataset(entry, i: int, base: Path) -> DatasetChoice:
    where = f"[[datasets]] entry {i + 1}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table with name and source.")
    _only(entry, {"name", "source", "text_column", "label_column", "description"}, where)
    name = _str(entry, "name", where)
    source = _str(entry, "source", f"{where} ('{name}')")
    if source != DEMO:
        p = _path(source, base)
        if not p.is_file():
            raise ConfigError(f"dataset '{name}': no file at '{p}'.")
        source = str(p)
    optional = {k: _str(entry, k, f"dataset '{name}'") if k in entry else None for k in ("text_column", "label_column")}
    return DatasetChoice(name=name, source=source, description=str(entry.get("description", "")), **optional)


def _auth(login: dict) -> AuthConfig:
    _only(login, {"mode", "provider", "allowed_emails", "allowed_domains"}, "[login]")
    mode = login.get("mode", "none")
    if mode not in AUTH_MODES:
        raise ConfigError(f"[login] mode must be one of {', '.join(AUTH_MODES)}, not {mode!r}.")
    provider = login.get("provider")
    if provider is not None and (not isinstance(provider, str) or not re.fullmatch(r"[A-Za-z0-9-]+", provider)):
        # Streamlit reads [auth.<provider>]; it does not support underscores in the name.
        raise ConfigError(f"[login] provider must be letters, digits and '-', got {provider!r}.")
    lists = {}
    for key in ("allowed_emails", "allowed_domains"):
        value = login.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ConfigError(f"[login] {key} must be a list of strings.")
        lists[key] = tuple(v.strip().lower().lstrip("@") for v in value)
    if mode != "oidc" and (provider or lists["allowed_emails"] or lists["allowed_domains"]):
        raise ConfigError("[login] provider and allow lists only apply to mode = \"oidc\".")
    return AuthConfig(mode=mode, provider=provider, **lists)


# ------------------------------------------------------------------------------------------------ readers
def _only(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"Unknown key(s) {', '.join(unknown)} in {where}; allowed: {', '.join(sorted(allowed))}.")


def _table(data: dict, key: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"'{key}' must be a table ([{key}]).")
    return value


def _array(data: dict, key: str) -> list:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ConfigError(f"'{key}' must be an array of tables ([[{key}]]).")
    return value


def _str(table: dict, key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: '{key}' must be a non-empty string.")
    return value.strip()


def _words(table: dict, key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(w, str) and w.strip() for w in value):
        raise ConfigError(f"{where} {key} must be a list of words, e.g. {key} = [\"et\", \"al\"].")
    return tuple(w.strip() for w in value)


def _int(table: dict, key: str, default: int, bounds: tuple[int, int], where: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise ConfigError(f"{where} {key} must be an integer in {bounds[0]}..{bounds[1]}, got {value!r}.")
    return value


def _bool(table: dict, key: str, default: bool, where: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where} {key} must be true or false, got {value!r}.")
    return value


def _path(value: str, base: Path) -> Path:
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve()


def _dir(table: dict, key: str, base: Path) -> Path | None:
    if key not in table:
        return None
    p = _path(_str(table, key, "[server]"), base)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"[server] {key}: '{p}' exists and is not a directory.")
    return p
