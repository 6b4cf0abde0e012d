"""Links (the address bar) and uploads through the app. A URL value no parser accepts (other digits than ASCII,
"inf", "1e400", control characters, a class the model lacks, a position past the document) is dropped with a
notice and the page works, on that run and the next; a hosted server with `allow_upload = false` offers no
file uploader anywhere, whatever a link asks for."""
from __future__ import annotations

import os
import re
import sys
import unicodedata
from pathlib import Path

import pytest

from pages._ui import url
from pages._ui.keys import K
from support.apps import app_test, page

traceback = pytest.mark.guards("traceback")
allowlist = pytest.mark.guards("allowlist")
ROOT = Path(__file__).resolve().parents[2]

# every character Python calls a digit or a number (superscripts, other scripts' digits, fractions, circled and
# fullwidth digits) except ASCII 0-9: int() reads some, float() others, str.isdigit() is True for many
OTHER_DIGITS = [chr(c) for c in range(sys.maxunicode + 1)
                if chr(c).isnumeric() and not "0" <= chr(c) <= "9" and unicodedata.category(chr(c)) != "Cs"]
NOT_NUMBERS = ["inf", "-inf", "Infinity", "nan", "NaN", "1e400", "1e3", "1_000", " 5", "5 ", "0x10", "+5", "5.",
               "-0", "１２"]


@traceback
def test_the_whole_number_parser_reads_ascii_digits_only():
    assert len(OTHER_DIGITS) > 1000
    for ch in OTHER_DIGITS:
        for raw in (ch, f"1{ch}", f"{ch}1"):
            assert url.url_int(raw) is None, raw
            assert not url.usable("token", raw) and not url.usable("seed", raw)
            assert url.url_option(raw) is None, raw
    for raw in NOT_NUMBERS:
        assert url.url_int(raw) is None and url.url_option(raw) in (None, raw)
        if _python_reads_as_number(raw) and raw not in ("-0",):
            assert url.url_option(raw) is None, raw
    assert [url.url_int(v, 0, 99) for v in ("0", "7", "99", "100", "-1", "")] == [0, 7, 99, None, None, None]
    assert url.url_option("0.95") == "0.95" and url.url_option("layer 3") == "layer 3"


@pytest.mark.guards("injection")
@pytest.mark.parametrize("raw", ["[x](http://evil.example)", "![i](http://evil.example/a.png)", "**b** $x$ <b>",
                                 "`code`", "\\[x\\](y)"])
def test_a_dropped_value_is_shown_as_typed_never_as_markdown(raw):
    shown = url.inert(repr(raw))
    assert re.sub(r"\\(.)", r"\1", shown) == repr(raw)  # what is read is what was typed
    assert not re.search(r"(?<!\\)[\[\]()*`$<>!]", shown)  # no markdown character left unescaped


@traceback
@pytest.mark.parametrize("raw", ["demo\x00", "a\nb", "x" * (url.MAX_LENGTH + 1), "\x7f"], ids=repr)
def test_text_values_refuse_control_characters_and_lengths_no_path_has(raw):
    for key in (K.MODEL, K.DATASET_PATH, K.EXTRA_STOPWORDS, "target", "doc_mode"):
        assert not url.usable(key, raw)
    assert url.usable(K.MODEL, "/data/models/modèle-1") and url.usable("target", "Ünïcode class")


def _python_reads_as_number(raw: str) -> bool:
    for parse in (int, float):
        try:
            parse(raw)
            return True
        except ValueError:
            pass
    return False


SIDEBAR_KEYS = [K.DOC_MODE, K.DOC_INDEX, K.MAX_TOKENS, K.MASK_NUMBERS, K.DATASET_KIND, "seed",
                K.page("heatmap", "grid"), K.page("heatmap", "scale")]
BAD_VALUES = ["²", "³", "٣", "１", "1e400", "inf", "-Infinity", "nan", "\x00"]


@pytest.fixture()
def local(demo, monkeypatch):
    monkeypatch.delenv("LONGVIZ_CONFIG", raising=False)


def _unexpected(at) -> list[str]:
    return [e.value for e in at.error if "Unexpected error" in e.value or "Something went wrong" in e.value]


@traceback
@pytest.mark.parametrize("shift", [0, 3, 6])
def test_bad_values_of_every_url_key_are_dropped_with_a_notice_and_the_page_works(local, shift):
    # each run gives every key another bad value (the parser's own test covers every pair)
    query = {key: BAD_VALUES[(i + shift) % len(BAD_VALUES)] for i, key in enumerate(SIDEBAR_KEYS)}
    at = app_test()
    at.query_params = {**query, K.MODEL: "demo\x00" if shift == 0 else "demo"}
    at.run()
    assert not at.exception and not _unexpected(at), (query, at.exception, [e.value for e in at.error])
    dropped = {re.sub(r"\\(.)", r"\1", re.match(r"The link's (\S+?)=", t.value).group(1)) for t in at.toast}
    assert set(SIDEBAR_KEYS) | ({K.MODEL} if shift == 0 else set()) <= dropped, (query, dropped)
    assert not set(SIDEBAR_KEYS) & set(at.query_params.keys())
    at.run()  # the next run (a rerun, any widget) is clean too
    assert not at.exception and not _unexpected(at)


@traceback
@pytest.mark.parametrize("query", [{"token": "²", "target": "no such class", "seed": "³"}, {"token": "99999"}],
                         ids=["unreadable", "past-the-end"])
def test_the_attribution_page_survives_a_bad_token_target_or_seed(local, query):
    at = app_test()
    at.query_params = {**query, "max_tokens": "64"}
    at.switch_page(page("attribution"))
    at.run()
    assert not at.exception and not _unexpected(at), [e.value for e in at.error]
    for key, value in query.items():
        if not url.usable(key, value):  # dropped before the page runs; a position or a class is checked where read
            assert any(f"{key}=" in t.value for t in at.toast)
    at.run()
    assert not at.exception and not _unexpected(at)


@traceback
@pytest.mark.parametrize("path, message", [("{tmp}", "is a folder"), ("/dev/zero", "not a regular file"),
                                           ("{tmp}/missing.csv", "No dataset at")], ids=["folder", "dev-zero", "missing"])
def test_a_link_to_a_dataset_path_that_is_not_a_file_shows_the_reason(local, tmp_path, path, message):
    at = app_test()
    at.query_params = {K.DATASET_KIND: "file path", K.DATASET_PATH: path.format(tmp=tmp_path), "max_tokens": "64"}
    at.run()  # the document page: its document comes from the dataset
    assert not at.exception and not _unexpected(at)
    assert any(message in e.value for e in at.error), [e.value for e in at.error]


# ------------------------------------------------------------------------------------------ uploads
@pytest.fixture()
def hosted(demo, tmp_path, monkeypatch):
    for key in ("LONGVIZ_CACHE_DIR", "LONGVIZ_CACHE_MEMORY_MB", "LONGVIZ_STORE_DIR"):
        monkeypatch.setenv(key, os.environ.get(key, ""))

    def make(allow_upload: bool) -> None:
        conf = tmp_path / "longviz.toml"
        conf.write_text('[[models]]\nname = "Demo"\nsource = "demo"\n[[datasets]]\nname = "Demo data"\nsource = "demo"\n'
                        f'[server]\nmax_tokens = 256\nallow_upload = {str(allow_upload).lower()}\n'
                        f'cache_dir = "{os.environ.get("LONGVIZ_CACHE_DIR") or tmp_path / "cache"}"\n')
        monkeypatch.setenv("LONGVIZ_CONFIG", str(conf))

    return make


LINKS_TO_UPLOADS = {"heatmap-imported-file": ("heatmap_grid", {"heatmap.scale": "true", "max_tokens": "64",
                                                               "heatmap.importance_source": "imported file"}),
                    "dataset-upload": ("document", {"dataset_path": "upload", "dataset_kind": "upload",
                                                    "max_tokens": "64"})}


@allowlist
@pytest.mark.parametrize("name", list(LINKS_TO_UPLOADS))
def test_with_uploads_off_no_link_reaches_a_file_uploader(hosted, name):
    target, query = LINKS_TO_UPLOADS[name]
    shown = {}
    for allow in (False, True):  # the same link with uploads on shows the uploader: the check can fail
        hosted(allow)
        at = app_test()
        at.query_params = dict(query)
        at.switch_page(page(target))
        at.run()
        assert not at.exception
        if name == "heatmap-imported-file":
            radio = at.radio(key="heatmap.importance_source")
            shown[allow] = "imported file" in radio.options
            if allow:
                radio.set_value("imported file").run()
        else:
            boxes = [s for s in at.selectbox if s.key == K.DATASET_PATH]
            shown[allow] = bool(boxes) and "Upload a file…" in boxes[0].options
        shown[allow] = shown[allow] or bool(at.get("file_uploader"))
        if not allow:
            assert not at.get("file_uploader")
            assert K.IMPORTED_IMPORTANCE not in at.session_state
    assert shown == {False: False, True: True}


@allowlist
def test_every_file_uploader_goes_through_the_one_door():
    sources = [ROOT / "app.py", *sorted((ROOT / "pages").rglob("*.py"))]
    calls = [(p.relative_to(ROOT).as_posix(), n) for p in sources for n, line in enumerate(p.read_text().splitlines(), 1)
             if "file_uploader(" in line]
    assert calls and all(path == "pages/_ui/hosting.py" for path, _ in calls), calls
    assert len(calls) == 1
