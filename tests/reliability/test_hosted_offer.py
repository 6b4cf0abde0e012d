"""A hosted server offers only what its configuration lists, on every page and in every scope, whatever a link or
the session asks for (issue 29): a configuration that lists no dataset reads none — not the demo either — and
every dataset scope says that this server offers none; one that lists one dataset reads that one only."""
from __future__ import annotations

import os

import pytest

from longviz_core import cache
from pages._ui import hosting
from pages._ui.keys import K
from support.apps import app_test, page

allowlist = pytest.mark.guards("allowlist")

# every page with a dataset scope: its file and the URL key of its scope radio
DATASET_SCOPES = {"faithfulness": "faithfulness.scope", "agreement": "similarity.scope",
                  "explainers": "explainers.scope", "heatmap_grid": "heatmap.scope", "token_counts": "counts.over"}
# the pages' other ways into a dataset, with a link asking for them: the attribution page's dataset-wide table
# (always drawn) and head importance, computed on the dataset, that scales attention
OTHER_DATASET_VIEWS = {"attribution": {}, "heatmap_grid": {"heatmap.scale": "true"},
                       "attention_overlay": {"overlay.scale": "true"}, "faithfulness": {"faithfulness.scale": "true"},
                       "agreement": {"similarity.scale": "true"}}
# a link naming the demo dataset every way the app has ever spelt it
DEMO_LINK = {K.DATASET_KIND: "demo", K.DATASET_PATH: "demo", "max_tokens": "64"}
TEXT = "Neural networks learn representations of programs, and compilers optimise them."
LAB_ROWS = 6  # the listed dataset's length (the demo has 60 documents)


@pytest.fixture()
def served(demo, tmp_path, monkeypatch):
    """serve(datasets) writes a configuration listing the demo model and, with datasets=True, one dataset of
    LAB_ROWS documents (a CSV), and points LONGVIZ_CONFIG at it; returns every dataset source the app reads."""
    for key in ("LONGVIZ_CACHE_DIR", "LONGVIZ_CACHE_MEMORY_MB", "LONGVIZ_STORE_DIR"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
    lab = tmp_path / "lab.csv"
    lab.write_text("text,label\n" + "".join(f'"{TEXT} Document {i}.",{i % 2}\n' for i in range(LAB_ROWS)))
    read: list[str] = []
    get_dataset = cache.get_dataset
    monkeypatch.setattr(cache, "get_dataset", lambda source, *a, **kw: read.append(source) or get_dataset(
        source, *a, **kw))

    def serve(datasets: bool) -> list[str]:
        conf = tmp_path / "longviz.toml"
        conf.write_text('[[models]]\nname = "Demo"\nsource = "demo"\n'
                        + ('[[datasets]]\nname = "Lab data"\nsource = "lab.csv"\n' if datasets else "")
                        + '[server]\nmax_tokens = 256\n'
                        + f'cache_dir = "{os.environ.get("LONGVIZ_CACHE_DIR") or tmp_path}"\n')
        monkeypatch.setenv("LONGVIZ_CONFIG", str(conf))
        return read

    serve.lab = str(lab.resolve())
    return serve


def _open(name: str, query: dict, state: dict | None = None):
    at = app_test()
    at.query_params = query
    for key, value in (state or {}).items():
        at.session_state[key] = value
    at.switch_page(page(name))
    at.run()
    assert not at.exception, at.exception
    assert not [e.value for e in at.error if "Unexpected error" in e.value]
    return at


def _texts(at) -> str:
    return " ".join(e.value for kind in ("caption", "info", "error", "markdown", "toast") for e in at.get(kind))


@allowlist
@pytest.mark.parametrize("name", list(DATASET_SCOPES))
def test_without_datasets_no_link_or_session_reaches_a_dataset_scope(served, name):
    read = served(datasets=False)
    key = DATASET_SCOPES[name]
    for how in ("link", "session"):  # a link asking for the dataset scope, and a session holding it
        query = {**DEMO_LINK, **({key: "dataset"} if how == "link" else {})}
        at = _open(name, query, {K.PASTED: TEXT, **({key: "dataset"} if how == "session" else {})})
        assert at.radio(key=key).options == ["this document"], how
        assert at.radio(key=key).value == "this document"
        shown = _texts(at)
        assert hosting.NO_DATASET in shown, (how, shown)
        if how == "link":
            assert any(f"{key}=" in t.value.replace("\\", "") for t in at.toast), [t.value for t in at.toast]
        assert not [s for s in at.slider if s.key == K.page(key.split(".")[0], "docs")]
        assert not [b for b in at.button if "dataset" in b.label.lower()]
        assert read == [], read  # no dataset was read at all: not the demo's 60 documents
        assert at.selectbox(key=K.DOC_MODE).options == ["pasted text"]


@allowlist
@pytest.mark.parametrize("name", list(OTHER_DATASET_VIEWS))
def test_without_datasets_dataset_views_say_the_server_offers_none(served, name):
    read = served(datasets=False)
    at = _open(name, {**DEMO_LINK, **OTHER_DATASET_VIEWS[name]}, {K.PASTED: TEXT})
    if any(b.key == K.page(name, "run") for b in at.button):  # the attributions come first (when not on disk yet)
        at.button(key=K.page(name, "run")).click().run()
        assert not at.exception, at.exception
    messages = [e.value for kind in ("error", "info") for e in at.get(kind) if "needs a" in e.value]
    assert messages and all(hosting.NO_DATASET in m for m in messages), messages
    assert not any("choose one in the sidebar" in m for m in messages), messages  # there is nothing to choose
    assert read == [], read


@allowlist
def test_without_datasets_no_link_picks_a_document_from_one(served):
    read = served(datasets=False)
    at = _open("document", {**DEMO_LINK, K.DOC_MODE: "by index", K.DOC_INDEX: "3"}, {K.PASTED: TEXT})
    mode = at.selectbox(key=K.DOC_MODE)
    assert mode.options == ["pasted text"] and mode.value == "pasted text"
    assert not [n for n in at.number_input if n.key == K.DOC_INDEX]
    assert not at.error and read == [], ([e.value for e in at.error], read)


@allowlist
@pytest.mark.parametrize("name", list(DATASET_SCOPES))
def test_with_one_dataset_only_that_one_is_read_whatever_the_link_names(served, name):
    read = served(datasets=True)
    key = DATASET_SCOPES[name]
    at = _open(name, {**DEMO_LINK, key: "dataset"})
    assert at.selectbox(key=K.DATASET_PATH).options == ["Lab data"]  # the demo dataset is not offered
    assert "dataset" in at.radio(key=key).options and at.radio(key=key).value == "dataset"
    assert hosting.NO_DATASET not in _texts(at)
    (docs,) = [s for s in at.slider if s.key == K.page(key.split(".")[0], "docs")]
    assert docs.max == LAB_ROWS  # the listed dataset's documents, not the demo's 60
    assert read and set(read) == {served.lab}, read


@allowlist
@pytest.mark.parametrize("datasets", [False, True], ids=["no-datasets", "one-dataset"])
def test_the_offer_refuses_every_model_and_dataset_the_configuration_does_not_list(served, tmp_path, datasets):
    served(datasets=datasets)
    (tmp_path / "other.csv").write_text("text,label\nx,0\n")
    refused = [(None, None), ("demo", None), ("demo", "demo"), ("file path", "demo"), ("file path", "/etc/passwd"),
               ("file path", str(tmp_path / "other.csv")), ("upload", "upload"), ("file path", "Lab data")]
    assert [hosting.dataset_source(kind, path) for kind, path in refused] == [None] * len(refused)
    assert hosting.dataset_source("file path", served.lab) == (("file path", served.lab) if datasets else None)
    assert hosting.dataset_source(None, served.lab) == (("file path", served.lab) if datasets else None)
    assert hosting.datasets_offered() is datasets
    for chosen in (None, "", "demo", "/etc/passwd", "demo-decoder", "Demo"):
        assert hosting.model_source(chosen) == "demo"  # the only model listed


@allowlist
def test_a_configuration_that_offers_nothing_to_analyse_is_refused(tmp_path):
    from longviz_core.config import ConfigError, load_config

    conf = tmp_path / "longviz.toml"
    conf.write_text('[[models]]\nname = "Demo"\nsource = "demo"\n[server]\nallow_pasted_text = false\n')
    with pytest.raises(ConfigError, match="offers nothing to analyse") as info:
        load_config(conf)
    assert "List a dataset, or allow pasted text or uploads" in str(info.value)
    conf.write_text(conf.read_text() + "allow_upload = true\n")  # the fix the message names works
    assert load_config(conf).allow_upload
