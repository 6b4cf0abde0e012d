"""Hosted mode: the configuration file (pure) and the hosting layer of the app (login gate, list-only choices)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import longviz_core as lv
from longviz_core.config import ConfigError, config_path, from_argv_or_env, load_config

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "docs" / "longviz.example.toml"


def _checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "longviz.toml"
    p.write_text(text)
    return p


MINIMAL = '[[models]]\nname = "Demo"\nsource = "demo"\n'


# ------------------------------------------------------------------------------------------------ the file
def test_the_sample_configuration_loads_once_its_paths_exist(tmp_path):
    model = _checkpoint(tmp_path / "models" / "papers")
    data = tmp_path / "papers_test.parquet"
    data.write_bytes(b"PAR1")
    text = (SAMPLE.read_text()
            .replace("/srv/models/longformer-finetuned_papers_v2", str(model))
            .replace("/srv/data/papers_test.parquet", str(data))
            .replace("/srv/longviz/", f"{tmp_path}/srv/"))
    cfg = load_config(_write(tmp_path, text))
    assert [m.name for m in cfg.models] == ["Demo (tiny Longformer, papers)", "Demo (tiny ModernBERT, papers)",
                                            "Demo (tiny Qwen3 decoder, papers)", "Longformer papers v2"]
    assert [m.source for m in cfg.models] == ["demo", "demo-modernbert", "demo-decoder",
                                              str(model.resolve())]  # demos by name
    assert cfg.model("Longformer papers v2").description.startswith("Fine-tuned")
    assert [d.source for d in cfg.datasets] == ["demo", str(data.resolve())]
    assert cfg.dataset("Papers test split").text_column == "text"
    assert (cfg.max_tokens, cfg.max_ig_steps, cfg.memory_mb) == (4096, 64, 16384)
    assert cfg.cache_dir == (tmp_path / "srv" / "cache").resolve()
    assert cfg.environment() == {
        "LONGVIZ_CACHE_MEMORY_MB": "16384",
        "LONGVIZ_CACHE_DIR": str((tmp_path / "srv" / "cache").resolve()),
        "LONGVIZ_STORE_DIR": str((tmp_path / "srv" / "store").resolve()),
    }
    assert (cfg.allow_upload, cfg.allow_pasted_text, cfg.auth.mode) == (False, True, "none")


def test_defaults_and_relative_paths(tmp_path):
    _checkpoint(tmp_path / "ckpt")
    (tmp_path / "d.csv").write_text("text,label\na,0\n")
    cfg = load_config(_write(tmp_path, '[[models]]\nname = "Mine"\nsource = "./ckpt"\n'
                                       '[[models]]\nname = "Hub"\nsource = "allenai/longformer-base-4096"\n'
                                       '[[datasets]]\nname = "D"\nsource = "d.csv"\n'))
    assert cfg.models[0].source == str((tmp_path / "ckpt").resolve())
    assert cfg.models[1].source == "allenai/longformer-base-4096"  # a Hub id stays an id
    assert cfg.datasets[0].source == str((tmp_path / "d.csv").resolve())
    assert (cfg.max_tokens, cfg.max_ig_steps, cfg.memory_mb) == (4096, 64, 4096)
    assert cfg.cache_dir is None and cfg.store_dir is None
    assert cfg.environment() == {"LONGVIZ_CACHE_MEMORY_MB": "4096"}
    with pytest.raises(ConfigError, match="No model named 'Nope'.*Mine, Hub"):
        cfg.model("Nope")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "lists no models"),
        (MINIMAL + "[server]\nmax_token = 10\n", r"Unknown key\(s\) max_token in \[server\]"),
        (MINIMAL + "colour = 1\n", "Unknown key"),  # a key after the array belongs to the last model
        (MINIMAL + '[server]\nmax_tokens = "4096"\n', "max_tokens must be an integer"),
        (MINIMAL + "[server]\nmax_tokens = 409600\n", r"16\.\.65536"),
        (MINIMAL + "[server]\nmax_ig_steps = 0\n", "max_ig_steps"),
        (MINIMAL + "[server]\nallow_upload = 1\n", "allow_upload must be true or false"),
        (MINIMAL + MINIMAL, "Two models are named 'Demo'"),
        ('[[models]]\nname = "X"\nsource = "/no/such/checkpoint"\n', "model 'X': no checkpoint at"),
        ('[[models]]\nname = "X"\nsource = "not a hub id!"\n', "neither a checkpoint directory nor a Hub id"),
        ('[[models]]\nname = ""\nsource = "demo"\n', "'name' must be a non-empty string"),
        (MINIMAL + '[[datasets]]\nname = "D"\nsource = "/no/such.csv"\n', "dataset 'D': no file at"),
        (MINIMAL + '[login]\nmode = "ldap"\n', "mode must be one of none, oidc, password"),
        (MINIMAL + '[login]\nmode = "oidc"\nprovider = "my_idp"\n', "letters, digits and '-'"),
        (MINIMAL + '[login]\nmode = "password"\nallowed_domains = ["x.org"]\n', "only apply to mode"),
        (MINIMAL + "[server\n", "not valid TOML"),
    ],
)
def test_invalid_configurations_name_the_problem(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, text))


def test_config_error_is_a_longviz_error(tmp_path):
    with pytest.raises(lv.LongvizError, match="No configuration file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('[[models]]\nname = "Caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)


def test_allow_lists(tmp_path):
    cfg = load_config(_write(tmp_path, MINIMAL + '[login]\nmode = "oidc"\nprovider = "lab-idp"\n'
                                                 'allowed_domains = ["@Lab.org"]\nallowed_emails = ["Guest@x.com"]\n'))
    auth = cfg.auth
    assert auth.provider == "lab-idp"
    assert auth.allows("ann@lab.org") and auth.allows("ANN@LAB.ORG") and auth.allows("guest@x.com")
    assert not auth.allows("ann@lab.org.evil.com") and not auth.allows("other@x.com") and not auth.allows(None)
    assert load_config(_write(tmp_path, MINIMAL)).auth.allows("anyone@anywhere")


def test_command_line_wins_over_environment(tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(MINIMAL.replace("Demo", "A"))
    b.write_text(MINIMAL.replace("Demo", "B"))
    env = {"LONGVIZ_CONFIG": str(a)}
    assert from_argv_or_env([], {}) is None  # local mode
    assert from_argv_or_env([], env).models[0].name == "A"
    assert from_argv_or_env(["--config", str(b)], env).models[0].name == "B"
    assert from_argv_or_env([f"--config={b}"], env).models[0].name == "B"
    assert config_path(["--other", "x"], {"LONGVIZ_CONFIG": "  "}) is None
    with pytest.raises(ConfigError, match="--config needs a file"):
        config_path(["--config"], {})
    with pytest.raises(ConfigError, match="No configuration file"):
        from_argv_or_env(["--config", str(tmp_path / "nope.toml")], {})


# ------------------------------------------------------------------------------------ the hosting layer
# A minimal app that calls the hosting layer as app.py / sidebar.sidebar() do once merged.
HOSTED_APP = """
from types import SimpleNamespace
import streamlit as st
from pages._ui import current, sidebar
from pages._ui import hosting, login
from pages._ui.keys import K
cfg = hosting.apply_host_config()
login.login_gate()
with st.sidebar:
    if cfg is not None:
        hosting.sidebar_sources(cfg)
    st.selectbox("Document", hosting.doc_modes(cfg), key=K.DOC_MODE)
if st.session_state.get(K.DATASET_KIND) == "file path":
    df = current.current_dataset(SimpleNamespace(id2label={0: "neg", 1: "pos"}))
    st.write(f"texts={list(df['text'])}")
st.write(f"model={st.session_state.get(K.MODEL)} dataset={st.session_state.get(K.DATASET_PATH)} "
         f"kind={st.session_state.get(K.DATASET_KIND)} limit={hosting.max_tokens_limit(cfg)} "
         f"steps={hosting.max_ig_steps(cfg, 5000)}")
"""


@pytest.fixture()
def hosted(tmp_path, monkeypatch):
    """Write a configuration and point LONGVIZ_CONFIG at it; the environment is restored afterwards."""
    for key in ("LONGVIZ_CACHE_DIR", "LONGVIZ_CACHE_MEMORY_MB", "LONGVIZ_STORE_DIR"):
        monkeypatch.setenv(key, os.environ.get(key, ""))  # registers the current value for restoring

    def make(extra: str = "", models: str = MINIMAL) -> Path:
        ckpt = tmp_path / "ckpt"
        if not ckpt.exists():
            _checkpoint(ckpt)
        # "text" is what detection would pick; the configuration names "body"
        (tmp_path / "d.csv").write_text("text,body,label\nnot this column,some text,0\n")
        text = (models + '[[models]]\nname = "Lab model"\nsource = "./ckpt"\n'
                '[[datasets]]\nname = "Lab data"\nsource = "d.csv"\ntext_column = "body"\n'
                f'[server]\nmax_tokens = 1024\nmax_ig_steps = 16\nmemory_mb = 512\n'
                f'cache_dir = "{os.environ["LONGVIZ_CACHE_DIR"] or tmp_path / "cache"}"\n'
                f'store_dir = "{tmp_path / "store"}"\n' + extra)
        path = _write(tmp_path, text)
        monkeypatch.setenv("LONGVIZ_CONFIG", str(path))
        return path

    return make


def _shown(at) -> str:
    return " ".join(m.value for m in at.markdown)


def test_hosted_sidebar_offers_names_only_and_applies_the_budget(hosted, tmp_path):
    from longviz_core import cache

    hosted()
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.run()
    assert not at.exception
    model = at.selectbox(key="model_source")
    assert model.options == ["Demo", "Lab model"]  # names, never server paths
    assert "model=demo " in _shown(at) and "limit=1024 steps=16" in _shown(at)
    assert at.selectbox(key="dataset_path").options == ["Lab data"]
    assert f"dataset={(tmp_path / 'd.csv').resolve()} kind=file path" in _shown(at)
    assert "texts=['some text']" in _shown(at)  # the configured text column, not the detected one
    model.set_value(str((tmp_path / "ckpt").resolve())).run()
    assert f"model={(tmp_path / 'ckpt').resolve()} " in _shown(at)
    assert os.environ["LONGVIZ_STORE_DIR"] == str(tmp_path / "store")
    assert os.environ["LONGVIZ_CACHE_MEMORY_MB"] == "512"
    assert cache.memory_cache().max_bytes == 512 * 2**20


def test_hosted_mode_can_forbid_pasted_text_and_allow_uploads(hosted):
    hosted("allow_pasted_text = false\nallow_upload = true\n")
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.run()
    assert "pasted text" not in at.selectbox(key="doc_mode").options
    assert at.selectbox(key="dataset_path").options == ["Lab data", "Upload a file…"]
    at.selectbox(key="dataset_path").set_value("upload").run()
    assert "kind=upload" in _shown(at)


def test_a_link_cannot_smuggle_a_server_path(hosted):
    hosted()
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.query_params = {"model_source": "/etc/passwd"}
    at.run()
    assert "model=demo " in _shown(at)
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.query_params = {"model_source": "Lab model"}  # links carry names
    at.run()
    assert "model=demo " not in _shown(at) and "ckpt" in _shown(at)


def test_invalid_configuration_stops_the_app(hosted, tmp_path):
    path = hosted()
    path.write_text(MINIMAL + "[server]\nmax_tokens = -1\n")
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert "hosting configuration is invalid" in at.error[0].value and "max_tokens" in at.error[0].value
    assert not at.markdown  # never falls back to local mode


def test_password_gate(hosted):
    hosted('[login]\nmode = "password"\n')
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.run()
    assert "no [longviz] password" in at.error[0].value and not at.markdown  # fails closed
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.secrets = {"longviz": {"password": "correct horse"}}
    at.run()
    assert not at.markdown and not at.selectbox  # nothing of the app before the password
    at.text_input(key="login.password").set_value("wrong")
    at.button[0].click().run()  # a form sends its fields with the submit
    assert "Wrong password" in at.error[0].value and not at.markdown
    at.text_input(key="login.password").set_value("correct horse")
    at.button[0].click().run()
    assert not at.error, at.error
    assert "model=demo" in _shown(at)
    other = AppTest.from_string(HOSTED_APP, default_timeout=60)  # another session is not let in by the first
    other.secrets = {"longviz": {"password": "correct horse"}}
    other.run()
    assert not other.markdown


def test_oidc_gate(hosted):
    hosted('[login]\nmode = "oidc"\nallowed_domains = ["lab.org"]\n')
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.run()
    assert "no [auth] section" in at.error[0].value and not at.markdown
    secrets = {"auth": {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "x" * 32,
                        "client_id": "id", "client_secret": "s", "server_metadata_url": "https://idp/.well-known"}}
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.secrets, at.user = secrets, {"is_logged_in": False}
    at.run()
    assert [b.label for b in at.button] == ["Log in"] and "model=" not in _shown(at)
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.secrets, at.user = secrets, {"is_logged_in": True, "email": "eve@elsewhere.com"}
    at.run()
    assert "not allowed" in at.error[0].value and "model=" not in _shown(at)
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.secrets, at.user = secrets, {"is_logged_in": True, "email": "ann@lab.org"}
    at.run()
    assert not at.error, at.error
    assert "model=demo" in _shown(at)
    assert any("Signed in as ann@lab.org" in c.value for c in at.caption)


def test_local_mode_is_unchanged(monkeypatch):
    monkeypatch.delenv("LONGVIZ_CONFIG", raising=False)
    at = AppTest.from_string(HOSTED_APP, default_timeout=60)
    at.run()
    assert not at.exception and not at.error
    assert "limit=16384 steps=5000" in _shown(at) and len(at.selectbox(key="doc_mode").options) == 5


def test_hosted_masking_defaults(hosted, tmp_path):
    from pages._ui.keys import K
    from tests.support.apps import app_test

    path = hosted('mask_numbers = true\nextra_stopwords = ["et", " al "]\n')
    cfg = load_config(path)
    assert (cfg.mask_numbers, cfg.extra_stopwords) == (True, ("et", "al"))
    assert (load_config(hosted()).mask_numbers, load_config(hosted()).extra_stopwords) == (False, ())
    with pytest.raises(ConfigError, match="list of words"):
        load_config(_write(tmp_path, MINIMAL + '[server]\nextra_stopwords = "et, al"\n'))
    hosted('mask_numbers = true\nextra_stopwords = ["et", "al"]\n')
    at = app_test()
    at.run()
    assert not at.exception
    assert at.sidebar.toggle(key=K.MASK_NUMBERS).value is True
    assert at.sidebar.text_input(key=K.EXTRA_STOPWORDS).value == "et, al"
