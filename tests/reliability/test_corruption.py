"""Truncated, overwritten and bit-flipped files of every kind the caches, the store and the demo write.

Caches: a damaged entry is never served; it is recomputed, to the same numbers. Store: a damaged unit or
manifest is a CacheCorruptError naming the file and the fix, on the ordinary read path; a damaged index is set
aside and the units are indexed from their files, with the same answers. Demo: a damaged file is found by the
checksums in its COMPLETE marker and the demo is restored."""
from __future__ import annotations

import logging
import os
import sqlite3
import time

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core import _disk
from longviz_core import attribution as ig
from longviz_core.attribution import cost
from longviz_core.dataset import store as st
from longviz_core.evaluation import importance as imp
from tiny import text_of

wrong = pytest.mark.guards("wrong")


def _truncate(b: bytes) -> bytes:
    return b[: len(b) // 2]


def _garbage(b: bytes) -> bytes:
    return b"\x00garbage" * 8


def _flip(b: bytes) -> bytes:
    """One bit, near the end (in the payload, past any header): same size, other content."""
    out = bytearray(b)
    out[len(out) - 9] ^= 0x04
    return bytes(out)


def _empty(b: bytes) -> bytes:
    return b""


DAMAGE = {"truncated": _truncate, "garbage": _garbage, "bit-flip": _flip, "empty": _empty}


def _damage(path, how):
    path.write_bytes(DAMAGE[how](path.read_bytes()))


# ================================================================================================ caches
@wrong
@pytest.mark.parametrize("how", list(DAMAGE))
def test_attribution_cache(tiny_longformer, tmp_path, how, caplog):
    analysis = lv.analyze(tiny_longformer, text_of(30), max_tokens=40)
    first = ig.integrated_gradients(tiny_longformer, analysis, n_steps=4, cache_dir=tmp_path)
    (path,) = (tmp_path / "attributions").glob("*.npz")
    _damage(path, how)
    assert ig.cached_attribution(tiny_longformer, analysis, n_steps=4, cache_dir=tmp_path) is None
    again = ig.integrated_gradients(tiny_longformer, analysis, n_steps=4, cache_dir=tmp_path)
    assert not again.from_cache and "unreadable" in caplog.text
    np.testing.assert_array_equal(again.raw, first.raw)  # the same computation on the same machine
    assert ig.cached_attribution(tiny_longformer, analysis, n_steps=4, cache_dir=tmp_path).from_cache


@wrong
@pytest.mark.parametrize("how", list(DAMAGE))
def test_head_importance_cache(tiny_longformer, tmp_path, how):
    df = pd.DataFrame({"text": [text_of(20), text_of(25)], "label": [0, 1]})
    first = imp.cached_head_importance(tiny_longformer, df, 48, 2, cache_dir=tmp_path)
    (path,) = (tmp_path / "head_importance").iterdir()
    _damage(path, how)
    assert imp._read_cached(path, (tiny_longformer.num_layers, tiny_longformer.num_heads)) is None
    np.testing.assert_array_equal(imp.cached_head_importance(tiny_longformer, df, 48, 2, cache_dir=tmp_path), first)


@wrong
@pytest.mark.parametrize("kind", ["flip-scans", "agreement", "faithfulness"])
@pytest.mark.parametrize("how", list(DAMAGE))
def test_json_caches(tmp_path, kind, how):
    store = _disk.JsonStore(kind, tmp_path)
    value = {"clear": 1234, "flip": None, "scores": [0.5, -0.25, 1e-300]}
    store.put("k", value)
    assert store.get("k") == value
    _damage(store.path("k"), how)
    assert store.get("k") is None


@wrong
@pytest.mark.parametrize("how", list(DAMAGE))
def test_ig_timing_cache(tiny_longformer, tmp_path, how):
    timing = {"step": 0.25, "forward": 0.125}
    cost._write_timing(tiny_longformer, 64, "fp32", timing, tmp_path)
    assert cost._read_timing(tiny_longformer, 64, "fp32", tmp_path) == timing
    _damage(cost._timing_path(tiny_longformer, 64, "fp32", tmp_path), how)
    assert cost._read_timing(tiny_longformer, 64, "fp32", tmp_path) is None



# ================================================================================================= store
def _manifest():
    return {"model": {"fingerprint": "m", "source": "tiny"}, "dataset": {"fingerprint": "d", "n_documents": 3},
            "max_tokens": 64, "kinds": {"attention": {"grid": 4}}, "versions": {}}


def _record(row: int) -> st.Record:
    return st.Record(arrays={"pooled": np.full((2, 2, 4, 4), row + 0.5)},
                     tables={"document": pd.DataFrame({"row": [row], "n_tokens": [10 + row], "label": [row % 2]})},
                     scalars={"row": row})


@pytest.fixture()
def store_root(tmp_path):
    root = tmp_path / "store"
    st.open_manifest(root, _manifest())
    with st.StoreWriter(root, "w") as w:
        for row in range(3):
            w.commit(st.doc_id_of(row), "attention", _record(row))
    return root


UNIT_FILES = ["pooled.npy", "document.parquet", "meta.json"]


@wrong
@pytest.mark.parametrize("name", UNIT_FILES)
@pytest.mark.parametrize("how", list(DAMAGE))
def test_store_unit_files_are_checked_on_every_read(store_root, name, how):
    unit = store_root / "docs" / st.doc_id_of(1) / "attention"
    _damage(unit / name, how)
    store = st.ResultStore(store_root)
    with pytest.raises(lv.CacheCorruptError) as info:
        store.load(st.doc_id_of(1), "attention")
    message = str(info.value)
    assert str(unit) in message and "run the same `longviz precompute` command again" in message
    if name == "pooled.npy":
        with pytest.raises(lv.CacheCorruptError):
            store.array(st.doc_id_of(1), "attention", "pooled")
    # the other units are whole and served
    assert np.array_equal(store.load(st.doc_id_of(2), "attention").arrays["pooled"], np.full((2, 2, 4, 4), 2.5))


@wrong
def test_the_named_fix_works(store_root):
    """Deleting the damaged unit and committing it again (what the precompute does) restores the store."""
    unit = store_root / "docs" / st.doc_id_of(1) / "attention"
    _damage(unit / "pooled.npy", "bit-flip")
    import shutil

    shutil.rmtree(unit)
    with st.StoreWriter(store_root, "w") as w:
        assert w.commit(st.doc_id_of(1), "attention", _record(1))
    store = st.ResultStore(store_root)
    assert store.verify() == [] and store.documents()["row"].tolist() == [0, 1, 2]


@wrong
@pytest.mark.parametrize("how", list(DAMAGE))
def test_store_manifest(store_root, how):
    _damage(store_root / "manifest.json", how)
    if how == "empty":
        (store_root / "manifest.json").write_text("")
    with pytest.raises(lv.CacheCorruptError, match="manifest .* cannot be trusted.*new --out"):
        st.ResultStore(store_root)


@wrong
def test_a_flipped_digit_in_the_manifest_settings_is_caught(store_root):
    text = (store_root / "manifest.json").read_text()
    assert '"grid": 4' in text
    (store_root / "manifest.json").write_text(text.replace('"grid": 4', '"grid": 6'))  # 0x34 -> 0x36: one bit
    with pytest.raises(lv.CacheCorruptError, match="checksum"):
        st.ResultStore(store_root)


INDEX_DAMAGE = {**DAMAGE, "zeroed-tail": lambda b: b[:4096] + b"\x00" * (len(b) - 4096)}


@wrong
@pytest.mark.parametrize("how", list(INDEX_DAMAGE))
def test_a_damaged_index_is_rebuilt_from_the_unit_files(store_root, how, caplog):
    intact = st.ResultStore(store_root)
    expected = intact.documents()
    intact.close()  # an open WAL reader keeps its shared lock on the file the damage below rewrites in place
    db = store_root / "index" / "w.sqlite"
    for extra in ("-wal", "-shm"):
        (store_root / "index" / f"w.sqlite{extra}").unlink(missing_ok=True)
    db.write_bytes(INDEX_DAMAGE[how](db.read_bytes()))
    with caplog.at_level(logging.WARNING):
        store = st.ResultStore(store_root)
        got = store.documents()
    pd.testing.assert_frame_equal(got, expected)
    assert store.doc_ids("attention") == [st.doc_id_of(r) for r in range(3)]
    # the next writer rebuilds its index; the store then answers from it again
    with st.StoreWriter(store_root, "w") as w:
        w.commit(st.doc_id_of(2), "attention", _record(2))  # exists: nothing written
        for row in range(3):
            if not w.indexed(st.doc_id_of(row), "attention"):
                w.index_from_files(st.doc_id_of(row), "attention")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 3
    pd.testing.assert_frame_equal(st.ResultStore(store_root).documents(), expected)


# ================================================================================================== demo
@pytest.fixture()
def demo_copy(tmp_path):
    from longviz_core.demo import ensure_demo

    return ensure_demo(cache_dir=tmp_path)  # restored from the shipped files: seconds


DEMO_FILES = ["model/model.safetensors", "model/tokenizer.json", "model/config.json", "dataset.parquet",
              "metrics.json"]


@wrong
@pytest.mark.parametrize("name", DEMO_FILES)
def test_a_damaged_demo_is_detected_and_restored(demo_copy, tmp_path, name, caplog):
    from longviz_core.demo import ensure_demo, file_checksums

    good = file_checksums(demo_copy.root)
    _damage(demo_copy.root / name, "bit-flip")
    with caplog.at_level(logging.WARNING):
        again = ensure_demo(cache_dir=tmp_path)
    assert "is damaged" in caplog.text and name in caplog.text
    assert file_checksums(again.root) == good


def _age(root, seconds: float) -> None:
    """Every file under `root` last written `seconds` ago."""
    t = time.time() - seconds
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (t, t))


@wrong
@pytest.mark.parametrize("name", ["model/model.safetensors", "dataset.parquet"])
def test_a_demo_damaged_after_it_was_verified_is_detected(demo_copy, tmp_path, name, caplog, monkeypatch):
    """Every page run asks for the demo; once its files have matched their checksums and are older than the
    kernel's timestamp tick, the next asks only compare sizes, times and inodes (no hashing) until a file is
    written: then the checksums are read again and the damage found."""
    from longviz_core.demo import ensure_demo, file_checksums
    from longviz_core.demo import shipped

    good = file_checksums(demo_copy.root)
    hashed = []
    digest = shipped.bytes_digest
    monkeypatch.setattr(shipped, "bytes_digest", lambda b: hashed.append(len(b)) or digest(b))
    for _ in range(2):
        ensure_demo(cache_dir=tmp_path)
    assert len(hashed) == 2 * len(good)  # just written (restored): checked every time
    _age(demo_copy.root, 60)
    for _ in range(3):
        ensure_demo(cache_dir=tmp_path)
    assert len(hashed) == 3 * len(good)  # settled: checked once, then not hashed again
    _damage(demo_copy.root / name, "bit-flip")  # same size, written now
    with caplog.at_level(logging.WARNING):
        again = ensure_demo(cache_dir=tmp_path)
    assert "is damaged" in caplog.text and name in caplog.text
    assert file_checksums(again.root) == good


@wrong
def test_a_demo_with_a_missing_file_or_marker_is_restored(demo_copy, tmp_path):
    from longviz_core.demo import ensure_demo, file_checksums

    good = file_checksums(demo_copy.root)
    (demo_copy.root / "model" / "tokenizer_config.json").unlink()
    assert file_checksums(ensure_demo(cache_dir=tmp_path).root) == good
    (demo_copy.root / "COMPLETE").write_text("{garbage")
    assert file_checksums(ensure_demo(cache_dir=tmp_path).root) == good


@wrong
def test_abandoned_build_folders_are_removed(demo_copy, tmp_path):
    from longviz_core.demo import DEMO_VERSION, ensure_demo

    left = tmp_path / f".demo-{DEMO_VERSION}-build-killed"
    (left / "model").mkdir(parents=True)
    (left / "model" / "model.safetensors").write_bytes(b"half")
    ensure_demo(cache_dir=tmp_path)
    assert not left.exists()
