"""Injection: document text shown as coloured HTML and exported as CSV must stay inert text; a hosted server's
links and widgets reach only what its configuration offers."""
from __future__ import annotations

import csv
import io
import os
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from longviz_core import export
from longviz_core.figures.text import token_overlay_html

injection = pytest.mark.guards("injection")
allowlist = pytest.mark.guards("allowlist")


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.spans = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "span" and "data-pos" in attrs:
            self.spans.append(attrs)
        if any(k.startswith("on") for k in attrs):
            self.tags.append("EVENT-HANDLER")


PAYLOADS = {
    "script": "<script>alert(1)</script>",
    "img-onerror": '<img src=x onerror="alert(1)">',
    "close-span": "</span><b>bold</b>",
    "attribute-double-quote": '" onmouseover="alert(1)',
    "attribute-single-quote": "' onmouseover='alert(1)",
    "entity": "&lt;script&gt; &amp;",
    "style-break": "</style><script>x</script>",
}


@injection
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_overlay_shows_markup_as_text(name):
    payload = PAYLOADS[name]
    tokens = ["<s>", "Ġhello", "Ġ" + payload, payload, "</s>"]
    html = token_overlay_html(tokens, np.array([0.0, 0.5, -1.0, 0.25, 0.0]), title=payload)
    p = _Tags()
    p.feed(html)
    assert "script" not in p.tags and "img" not in p.tags and "b" not in p.tags and "EVENT-HANDLER" not in p.tags
    assert [int(s["data-pos"]) for s in p.spans] == list(range(5))  # no span closed early, none added
    assert payload in p.spans[3]["title"]  # the hover text holds the markup, as text


@injection
@pytest.mark.parametrize("name", ["script", "img-onerror"])
def test_standalone_html_export_title_is_escaped(name):
    page = export.standalone_html("<p>ok</p>", title=PAYLOADS[name]).decode()
    p = _Tags()
    p.feed(page)
    assert "script" not in p.tags and "img" not in p.tags and "EVENT-HANDLER" not in p.tags


CSV_CELLS = {
    "equals": ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"),
    "plus": ("+1+1", "'+1+1"),
    "minus": ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
    "at": ("@SUM(1+1)*cmd|' /C calc'!A0", "'@SUM(1+1)*cmd|' /C calc'!A0"),
    "tab": ("\t=1+1", "'\t=1+1"),
    "carriage-return": ("\r=1+1", "'\r=1+1"),
    "newline-inside": ("line one\n=line two", "line one\n=line two"),
    "plain": ("Ġtraining", "Ġtraining"),
}


@injection
@pytest.mark.parametrize("name", list(CSV_CELLS))
def test_csv_cells_cannot_become_formulas(name):
    cell, expected = CSV_CELLS[name]
    df = pd.DataFrame({"token": ["before", cell, "after"], "value": [-0.5, 1.0, -2.0]})
    data = export.table_csv(df)
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    assert rows == [["token", "value"], ["before", "-0.5"], [expected, "1.0"], ["after", "-2.0"]]  # one cell each
    for row in rows[1:]:  # what a spreadsheet would evaluate: a text cell starting with a formula character
        assert not row[0].startswith(("=", "+", "-", "@", "\t", "\r"))


@injection
def test_csv_headers_and_index_are_escaped_and_numbers_stay_numbers():
    df = pd.DataFrame({"=cmd": [-1, 2], "n": [-0.25, np.nan]}, index=["@a", "b"])
    rows = list(csv.reader(io.StringIO(export.table_csv(df, index=True).decode("utf-8-sig"), newline="")))
    assert rows == [["", "'=cmd", "n"], ["'@a", "-1", "-0.25"], ["b", "2", ""]]


# ------------------------------------------------------------------------------------------ hosted mode
_MINI_APP = """
import streamlit as st
from pages._ui import hosting
from pages._ui.keys import K
cfg = hosting.apply_host_config()
with st.sidebar:
    hosting.sidebar_sources(cfg)
    st.selectbox("Document", hosting.doc_modes(cfg), key=K.DOC_MODE, bind="query-params")
    st.number_input("Max tokens", 16, hosting.max_tokens_limit(cfg), 256, key=K.MAX_TOKENS, bind="query-params")
st.write(f"model={st.session_state.get(K.MODEL)} dataset={st.session_state.get(K.DATASET_PATH)} "
         f"mode={st.session_state.get(K.DOC_MODE)} max_tokens={st.session_state.get(K.MAX_TOKENS)}")
"""


@pytest.fixture()
def hosted_app(tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (tmp_path / "d.csv").write_text("text,label\nsome text,0\n")
    for key in ("LONGVIZ_CACHE_DIR", "LONGVIZ_CACHE_MEMORY_MB", "LONGVIZ_STORE_DIR"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
    conf = tmp_path / "longviz.toml"
    conf.write_text('[[models]]\nname = "Demo"\nsource = "demo"\n[[models]]\nname = "Lab model"\nsource = "./ckpt"\n'
                    '[[datasets]]\nname = "Lab data"\nsource = "d.csv"\n'
                    f'[server]\nmax_tokens = 1024\nallow_pasted_text = false\ncache_dir = "{tmp_path / "cache"}"\n')
    monkeypatch.setenv("LONGVIZ_CONFIG", str(conf))

    def run(query: dict | None = None) -> tuple[AppTest, str]:
        at = AppTest.from_string(_MINI_APP, default_timeout=60)
        at.query_params = query or {}
        at.run()
        assert not at.exception, at.exception
        return at, " ".join(m.value for m in at.markdown)

    return run


HOSTILE_LINKS = {
    "server-path-model": ({"model_source": "/etc/passwd"}, "model=demo "),
    "relative-path-model": ({"model_source": "../../ckpt"}, "model=demo "),
    "model-by-source-not-name": ({"model_source": "./ckpt"}, "model=demo "),
    "server-path-dataset": ({"dataset_path": "/etc/shadow"}, "dataset=" + "{d}"),
    "forbidden-pasted-text": ({"doc_mode": "pasted text"}, "mode=by index"),
    "max-tokens-over-the-cap": ({"max_tokens": "100000"}, "max_tokens=256"),
    "max-tokens-not-a-number": ({"max_tokens": "1e9"}, "max_tokens=256"),
}


@allowlist
@pytest.mark.parametrize("name", list(HOSTILE_LINKS))
def test_a_link_cannot_reach_past_the_configuration(hosted_app, tmp_path, name):
    query, expected = HOSTILE_LINKS[name]
    _, shown = hosted_app(query)
    assert expected.format(d=(tmp_path / "d.csv").resolve()) in shown
    assert "/etc/" not in shown and ".." not in shown


@allowlist
def test_widgets_offer_names_only_and_refuse_other_values(hosted_app):
    at, _ = hosted_app()
    model = at.selectbox(key="model_source")
    assert model.options == ["Demo", "Lab model"]  # names, never server paths
    assert "pasted text" not in at.selectbox(key="doc_mode").options
    with pytest.raises(Exception):  # a value outside the list cannot be set (the browser cannot send one either)
        model.set_value("/etc/passwd").run()
    with pytest.raises(Exception):
        at.number_input(key="max_tokens").set_value(10**6).run()


def _frames_with_multi_index():
    cells = [v for v, _ in CSV_CELLS.values() if v.startswith(("=", "+", "-", "@"))]
    rows = pd.MultiIndex.from_tuples([(c, f"{c}-inner") for c in cells] + [("plain", -3)], names=["=level", "@n"])
    yield "rows", pd.DataFrame({"value": np.arange(len(rows), dtype=float)}, index=rows), True
    columns = pd.MultiIndex.from_tuples([(c, "+sub") for c in cells], names=["-names", None])
    yield "columns", pd.DataFrame([np.arange(len(cells))], columns=columns), False
    yield "columns-with-index", pd.DataFrame([np.arange(len(cells))], columns=columns), True
    yield "named-index", pd.DataFrame({"v": [1]}, index=pd.Index(["=1+1"], name="=cmd")), True


@injection
@pytest.mark.parametrize("name, df, index", list(_frames_with_multi_index()),
                         ids=[n for n, *_ in _frames_with_multi_index()])
def test_index_cells_of_every_level_and_their_names_are_escaped(name, df, index):
    rows = list(csv.reader(io.StringIO(export.table_csv(df, index=index).decode("utf-8-sig"), newline="")))
    cells = [c for row in rows for c in row]
    assert not [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r"))]
    assert not [c for c in cells if c.startswith("-") and not _is_number(c)]  # -3 stays the number -3
    assert sum(c.startswith("'") for c in cells) >= 2


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
