"""The bad-input list of issue 7, walked through the core (typed errors) and the UI (a clear message, no
traceback, and the work already done is still there afterwards).

  1 empty or whitespace text            6 a missing model path
  2 text 10x the maximum length          7 a checkpoint that is not a sequence classifier
  3 binary or non-UTF-8 upload           8 a truncated or corrupted cache / store file
  4 CSV without a text column            9 two sessions writing the same cache entry at once
  5 labels outside the model's classes
"""
from __future__ import annotations

import io
import pickle
import shutil
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import longviz_core as lv
from longviz_core import attribution as ig
from longviz_core._disk import unsealed
from longviz_core.dataset import store as st_store
from support.apps import app_test, local_app, page
from tiny import text_of

TIMEOUT = 300
APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _mlm_checkpoint(tmp_path: Path, classifier_dir: Path) -> Path:
    """A Longformer masked-LM checkpoint (not a sequence classifier) with a working tokenizer."""
    from transformers import LongformerConfig, LongformerForMaskedLM

    path = tmp_path / "mlm"
    LongformerForMaskedLM(LongformerConfig.from_pretrained(classifier_dir)).save_pretrained(path)
    for f in classifier_dir.iterdir():
        if f.name.startswith(("vocab", "merges", "tokenizer", "special")):
            shutil.copy(f, path / f.name)
    return path


BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
LATIN1 = "text,label\ncafé crème,0\nnaïve,1\n".encode("latin-1")
NO_TEXT = b"a,b\n1,2\n3,4\n"
BAD_LABELS = b"text,label\nthe model learns,0\nthe compiler checks,7\n"


# ================================================================================================= core
def test_1_empty_or_whitespace_text(tiny_longformer):
    for text in ("", "   \n\t ", "\u2003\u00a0"):
        with pytest.raises(lv.InputTextError, match="empty"):
            lv.analyze(tiny_longformer, text)
    with pytest.raises(lv.InputTextError, match="binary"):
        lv.analyze(tiny_longformer, "a\x00b")


def test_2_text_ten_times_the_maximum_is_truncated_not_refused(tiny_longformer):
    m = tiny_longformer
    a = lv.analyze(m, text_of(12 * m.max_tokens), max_tokens=m.max_tokens)
    assert a.n == m.max_tokens and a.encoded.truncated
    assert a.encoded.n_text_tokens_original >= 10 * m.max_tokens
    assert np.isclose(a.probs.sum(), 1.0)
    with pytest.raises(lv.InputTextError, match="exceeds what this model accepts"):
        lv.analyze(m, "the model", max_tokens=10 * m.max_tokens)


def test_3_binary_non_utf8_and_pickled_uploads_are_refused_unread(monkeypatch):
    def never(*a, **k):  # no user file may ever be unpickled
        raise AssertionError("a user file was unpickled")

    monkeypatch.setattr(pickle, "loads", never)
    monkeypatch.setattr(pickle, "load", never)
    monkeypatch.setattr(pd, "read_pickle", never)
    with pytest.raises(lv.DatasetError, match="binary"):
        lv.load_dataset(BINARY, filename="data.csv")
    with pytest.raises(lv.DatasetError, match="not UTF-8"):
        lv.load_dataset(LATIN1, filename="data.csv")
    pickled = pickle.dumps(pd.DataFrame({"text": ["a"], "label": [0]}), protocol=4)
    for name in ("data.pkl", "data.csv", "data.parquet"):
        with pytest.raises(lv.DatasetError):
            lv.load_dataset(pickled, filename=name)
    with pytest.raises(lv.DatasetError, match="Could not parse"):
        lv.load_dataset(b"PAR1" + b"\x01" * 64, filename="data.parquet")  # a truncated Parquet file
    with pytest.raises(lv.DatasetError, match="empty"):
        lv.load_dataset(b"  \n", filename="data.csv")


def test_4_csv_without_a_text_column():
    with pytest.raises(lv.DatasetError, match="No text column"):
        lv.load_dataset(NO_TEXT, filename="data.csv")
    with pytest.raises(lv.DatasetError, match="No text column 'body'"):
        lv.load_dataset(b"text,label\nhello,0\n", filename="data.csv", text_column="body")


def test_5_labels_outside_the_models_classes():
    id2label = {0: "programming_languages", 1: "artificial_intelligence"}
    with pytest.raises(lv.DatasetError, match=r"outside the model's classes 0\.\.1"):
        lv.load_dataset(BAD_LABELS, filename="data.csv", id2label=id2label)
    with pytest.raises(lv.DatasetError, match="not among the model's classes"):
        lv.load_dataset(b"text,label\nhello,sports\n", filename="data.csv", id2label=id2label)
    ok = lv.load_dataset(b"text,label\nhello,Artificial_Intelligence\n", filename="d.csv", id2label=id2label)
    assert ok["label"].tolist() == [1]


def test_6_missing_model_path(tmp_path):
    with pytest.raises(lv.ModelNotFoundError, match="No model directory"):
        lv.load_model(str(tmp_path / "no-such-model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(lv.ModelNotFoundError, match="config.json"):
        lv.load_model(str(tmp_path / "empty"))


def test_7_a_checkpoint_that_is_not_a_sequence_classifier(tmp_path, tiny_longformer_dir):
    with pytest.raises(lv.NotAClassifierError, match="not a sequence classifier"):
        lv.load_model(str(_mlm_checkpoint(tmp_path, tiny_longformer_dir)))


@pytest.mark.slow
def test_8_corrupted_attribution_cache_is_recomputed(tiny_longformer, tmp_path):
    m = tiny_longformer
    analysis = lv.analyze(m, text_of(40), max_tokens=48)
    first = ig.integrated_gradients(m, analysis, n_steps=4, cache_dir=tmp_path)
    assert not first.from_cache
    files = list((tmp_path / "attributions").glob("*.npz"))
    assert len(files) == 1
    good = files[0].read_bytes()
    for damage in (good[: len(good) // 2], b"", b"garbage" * 10, good[:-7] + b"\x00" * 7):
        files[0].write_bytes(damage)
        assert ig.cached_attribution(m, analysis, n_steps=4, cache_dir=tmp_path) is None
        again = ig.integrated_gradients(m, analysis, n_steps=4, cache_dir=tmp_path)
        assert not again.from_cache  # recomputed, not crashed
        np.testing.assert_allclose(again.scores, first.scores, rtol=1e-5, atol=1e-7)
        hit = ig.integrated_gradients(m, analysis, n_steps=4, cache_dir=tmp_path)
        assert hit.from_cache  # and the repaired file serves the next reader
        np.testing.assert_array_equal(hit.scores, again.scores)


def _store(root: Path) -> Path:
    manifest = {"model": {"fingerprint": "m", "source": "tiny"}, "dataset": {"fingerprint": "d", "n_documents": 2},
                "max_tokens": 64, "kinds": {"attention": {"grid": 4}}, "versions": {}}
    st_store.open_manifest(root, manifest)
    with st_store.StoreWriter(root) as w:
        for row in range(2):
            w.commit(st_store.doc_id_of(row), "attention",
                     st_store.Record(arrays={"pooled": np.full((2, 2, 4, 4), row + 1.0)},
                                     tables={"document": pd.DataFrame({"row": [row], "n_tokens": [10 + row]})},
                                     scalars={"row": row}))
    return root


def test_8_corrupted_store_files_are_reported_and_the_rest_is_kept(tmp_path):
    root = _store(tmp_path / "store")
    store = st_store.ResultStore(root)
    npy = root / "docs" / st_store.doc_id_of(0) / "attention" / "pooled.npy"
    npy.write_bytes(npy.read_bytes()[:40])  # truncated
    with pytest.raises(lv.CacheCorruptError, match="run the same `longviz precompute` command again"):
        store.load(st_store.doc_id_of(0), "attention")
    problems = store.verify()
    assert len(problems) == 1 and "pooled.npy" in problems[0]
    # the other document's work is intact
    kept = store.load(st_store.doc_id_of(1), "attention")
    assert np.array_equal(kept.arrays["pooled"], np.full((2, 2, 4, 4), 2.0))
    meta = root / "docs" / st_store.doc_id_of(1) / "attention" / "meta.json"
    meta.write_text(meta.read_text()[:25])
    with pytest.raises(lv.CacheCorruptError, match="unreadable"):
        store.load(st_store.doc_id_of(1), "attention")
    (root / "manifest.json").write_text('{"model": {"finger')
    with pytest.raises(lv.CacheCorruptError, match="manifest"):
        st_store.ResultStore(root)


def test_9_two_sessions_writing_the_same_cache_entry(tiny_longformer, tmp_path):
    m = tiny_longformer
    analysis = lv.analyze(m, text_of(30), max_tokens=40)
    results, errors = [None] * 4, []
    barrier = threading.Barrier(4)

    def session(i):
        try:
            barrier.wait()
            results[i] = ig.integrated_gradients(m, analysis, n_steps=4, cache_dir=tmp_path)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results[1:]:
        np.testing.assert_allclose(r.scores, results[0].scores, rtol=1e-5, atol=1e-7)
    names = [f.name for f in (tmp_path / "attributions").iterdir()]
    assert sum(n.endswith(".npz") for n in names) == 1 and not any(n.endswith(".tmp") for n in names)
    assert ig.cached_attribution(m, analysis, n_steps=4, cache_dir=tmp_path) is not None

    # the in-memory cache: one computation however many sessions ask at once
    lru, calls = lv.BudgetLRU(10**9), []
    barrier = threading.Barrier(8)

    def ask():
        barrier.wait()
        return lru.get_or_compute("k", lambda: calls.append(1) or np.arange(3), lambda v: v.nbytes)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and lru.computed == 1

    # two precompute writers finishing the same store unit: one wins, the unit stays whole
    root = _store(tmp_path / "store")
    shutil.rmtree(root / "docs" / st_store.doc_id_of(1))
    record = st_store.Record(arrays={"pooled": np.ones((2, 2, 4, 4))},
                             tables={"document": pd.DataFrame({"row": [1], "n_tokens": [11]})})
    wins = []
    barrier = threading.Barrier(2)

    def write(name):
        with st_store.StoreWriter(root, writer=name) as w:
            barrier.wait()
            wins.append(w.commit(st_store.doc_id_of(1), "attention", record))

    threads = [threading.Thread(target=write, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False, True]
    reread = st_store.ResultStore(root)
    assert reread.verify() == [] and reread.count("attention") == 2


# =================================================================================================== UI
# The app in local mode on the demo. After every bad input the page shows a message (no exception) and,
# once the input is put right, the earlier result comes back from memory: nothing was lost or recomputed.
@pytest.fixture()
def app(demo, monkeypatch):
    return local_app(monkeypatch, 256)


def _metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def _fails_then_recovers(at, break_it, repair, message: str) -> None:
    """`break_it(at)` must end in an error containing `message`; after `repair(at)` the page shows what it
    showed before, served from memory (no analysis recomputed)."""
    from longviz_core import cache

    before, computed = _metrics(at), cache.memory_cache().computed
    break_it(at)
    assert not at.exception, at.exception
    assert at.error and message in at.error[0].value, [e.value for e in at.error]
    repair(at)
    assert not at.exception and not at.error
    assert _metrics(at) == before
    assert cache.memory_cache().computed == computed


def test_ui_1_2_empty_and_overlong_text(app):
    from pages._ui.keys import K

    def paste(text):
        def do(at):
            at.selectbox(key=K.DOC_MODE).set_value("pasted text").run()
            at.text_area(key=K.PASTED).set_value(text).run()
        return do

    back = lambda at: at.selectbox(key=K.DOC_MODE).set_value("by index").run()  # noqa: E731
    _fails_then_recovers(app, paste("  \n\t  "), back, "Paste a text")
    paste("neural networks learn attention over long documents. " * 1500)(app)  # ~10x the 256-token maximum
    assert not app.exception and not app.error
    assert _metrics(app)["Tokens analysed"] == "256"
    assert "Truncated" in app.warning[0].value


def test_ui_3_binary_and_non_utf8_uploads(app):
    from pages._ui.keys import K

    def upload(name, data):
        def do(at):
            at.selectbox(key=K.DATASET_KIND).set_value("upload").run()
            at.file_uploader(key=K.DATASET_UPLOAD).set_value((name, data, "text/csv")).run()
        return do

    back = lambda at: at.selectbox(key=K.DATASET_KIND).set_value("demo").run()  # noqa: E731
    _fails_then_recovers(app, upload("data.csv", BINARY), back, "binary")
    _fails_then_recovers(app, upload("data.csv", LATIN1), back, "not UTF-8")
    # a pickle disguised as CSV (a .pkl name is refused by the uploader's type list before it reaches us)
    _fails_then_recovers(app, upload("data.csv", pickle.dumps({"text": ["x"]})), back, "binary")


def test_ui_4_5_csv_without_text_and_labels_outside_the_classes(app, tmp_path):
    from pages._ui.keys import K

    def path_to(data):
        def do(at):
            p = tmp_path / f"d{len(list(tmp_path.iterdir()))}.csv"
            p.write_bytes(data)
            at.selectbox(key=K.DATASET_KIND).set_value("file path").run()
            at.text_input(key=K.DATASET_PATH).set_value(str(p)).run()
        return do

    back = lambda at: at.selectbox(key=K.DATASET_KIND).set_value("demo").run()  # noqa: E731
    _fails_then_recovers(app, path_to(NO_TEXT), back, "No text column")
    _fails_then_recovers(app, path_to(BAD_LABELS), back, "outside the model's classes")


def test_ui_6_7_missing_model_and_not_a_classifier(app, tmp_path, tiny_longformer_dir):
    from pages._ui.keys import K

    def model(source):
        return lambda at: at.text_input(key=K.MODEL).set_value(source).run()

    _fails_then_recovers(app, model(str(tmp_path / "no-such-model")), model("demo"), "No model directory")
    mlm = _mlm_checkpoint(tmp_path, tiny_longformer_dir)
    _fails_then_recovers(app, model(str(mlm)), model("demo"), "not a sequence classifier")


def _attribution_page(demo_at_256: AppTest) -> AppTest:
    at = demo_at_256
    at.switch_page(page("attribution")).run()
    at.selectbox(key="attribution.steps").set_value("custom").run()
    at.number_input(key="attribution.steps_n").set_value(3).run()
    assert not at.exception and not at.error
    return at


def test_ui_8_a_corrupted_attribution_cache_file_is_recomputed(app, demo_model, demo_dataset):
    at = _attribution_page(app)
    run = [b for b in at.button if b.label == "Compute attributions"]
    if run:
        run[0].click().run()
    assert not at.exception and not at.error
    score = _metrics(at)["Attribution score"]
    analysis = lv.analyze(demo_model, demo_dataset["text"].iloc[0], 256)
    cached = ig.cached_attribution(demo_model, analysis, n_steps=3)
    assert cached is not None and f"{cached.total:+.3f}" == score
    from longviz_core._disk import cache_root

    path = cache_root() / "attributions" / f"{cached.key}.npz"
    path.write_bytes(path.read_bytes()[:100])  # truncated by a full disk or a killed copy
    # a new session: the damaged entry is not an error, the button offers to compute it again
    from pages._ui.keys import K

    other = app_test()
    other.run()
    other.number_input(key=K.MAX_TOKENS).set_value(256).run()
    other = _attribution_page(other)
    assert [b.label for b in other.button if b.label == "Compute attributions"]
    next(b for b in other.button if b.label == "Compute attributions").click().run()
    assert not other.exception and not other.error
    assert _metrics(other)["Attribution score"] == score
    assert ig.cached_attribution(demo_model, analysis, n_steps=3) is not None  # the file is whole again


@pytest.mark.slow
def test_ui_9_two_sessions_write_the_same_entry_at_once(demo, tmp_path, monkeypatch):
    """Two real browser sessions (the WebSocket protocol) ask for the same attribution at the same moment."""
    import os

    from support.servers import Session, serve

    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / demo.root.name).symlink_to(demo.root)
    env = dict(os.environ, LONGVIZ_CACHE_DIR=str(cache_dir))
    env.pop("LONGVIZ_CONFIG", None)
    proc, port = serve(Path(APP), env, tmp_path / "server.log")
    barrier, out = threading.Barrier(2, timeout=300), [{}, {}]

    def session(i):
        s = Session(port)
        try:
            s.run()
            s.set("max_tokens", int_value=256)
            s.run(page="attribution")
            s.set("attribution.steps", string_value="custom")
            s.run()
            s.set("attribution.steps_n", int_value=3)
            s.run()
            barrier.wait()
            s.run(trigger="attribution.run")
            out[i] = {"problems": s.problems(), "score": s.metric("Attribution score").body}
        except Exception as exc:  # noqa: BLE001
            out[i] = {"problems": [f"{type(exc).__name__}: {exc}"]}
        finally:
            s.close()

    try:
        threads = [threading.Thread(target=session, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        proc.terminate()
        proc.wait(30)
    assert out[0]["problems"] == [] and out[1]["problems"] == [], out
    assert out[0]["score"] == out[1]["score"]
    files = list((cache_dir / "attributions").glob("*.npz"))
    assert len(files) == 1 and np.load(io.BytesIO(unsealed(files[0].read_bytes())))["raw"].size > 0  # one whole file
    assert "Traceback" not in (tmp_path / "server.log").read_text()
