"""The result store on its own (no model): atomic units, the SQLite index against the files, manifests,
damage detection, and the aggregation functions against direct pandas / numpy computations."""
from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

from longviz_core.dataset.aggregate import (
    TOKEN_TABLE_COLUMNS,
    combine_head_means,
    combine_set_counts,
    combine_token_sums,
    mean_arrays,
)
from longviz_core.dataset.store import (
    NUMERIC_PACKAGES,
    Record,
    ResultStore,
    StoreWriter,
    doc_id_of,
    open_manifest,
)
from longviz_core.errors import CacheCorruptError, ManifestMismatchError, StoreError

VERSIONS = {p: "1.0" for p in NUMERIC_PACKAGES}


def manifest(model="m1", dataset="d1", max_tokens=64, kinds=None, versions=VERSIONS):
    return {"model": {"fingerprint": model, "source": "x", "num_layers": 2, "num_heads": 3},
            "dataset": {"fingerprint": dataset, "source": "y", "n_documents": 5},
            "max_tokens": max_tokens, "kinds": kinds or {"attribution": {"n_steps": 4}}, "versions": dict(versions)}


def by_token(rng, tokens):
    k = len(tokens)
    counts = rng.integers(1, 4, size=k)
    return pd.DataFrame({"token": tokens, "attribution": rng.normal(size=k), "count": counts,
                         "attribution_unmasked": rng.normal(size=k),
                         "count_unmasked": np.where(rng.random(k) < 0.3, 0, counts)})


def record(rng, tokens=("a", "b", "c")):
    return Record(
        arrays={"scores": rng.normal(size=7), "ids": np.arange(7, dtype=np.int64)},
        tables={"by_token": by_token(rng, list(tokens)),
                "summary": pd.DataFrame({"target": [1], "converged": [True], "delta": [np.nan],
                                         "label": pd.array([pd.NA], dtype="Int64"), "note": ["é ✓"]})},
        scalars={"delta": np.float64(0.5), "target": np.int64(1), "nan": float("nan")},
    )


@pytest.fixture()
def store_dir(tmp_path):
    root = tmp_path / "store"
    open_manifest(root, manifest())
    return root


def test_units_round_trip_through_files_and_index(store_dir):
    rng = np.random.default_rng(0)
    records = {doc_id_of(r): record(rng) for r in (0, 3, 12)}
    with StoreWriter(store_dir, "w") as w:
        for doc_id, rec in records.items():
            assert w.commit(doc_id, "attribution", rec)
    store = ResultStore(store_dir)
    assert store.doc_ids("attribution") == ["0000000", "0000003", "0000012"]
    assert store.count("attribution") == 3 and store.has("attribution") and not store.has("attention")
    for doc_id, rec in records.items():
        back = store.load(doc_id, "attribution")
        for name, arr in rec.arrays.items():
            np.testing.assert_array_equal(back.arrays[name], arr)
            assert back.arrays[name].dtype == arr.dtype
        for name, df in rec.tables.items():
            pd.testing.assert_frame_equal(back.tables[name], df)
        assert back.scalars == {"delta": 0.5, "target": 1, "nan": None}
    # the SQLite mirror holds the same rows as the Parquet files, dtypes restored (bool, nullable int)
    for name in ("by_token", "summary"):
        expected = pd.concat([rec.tables[name].assign(doc_id=d) for d, rec in records.items()], ignore_index=True)
        got = store.table("attribution", name)
        pd.testing.assert_frame_equal(got[expected.columns], expected, check_dtype=False)
    summary = store.table("attribution", "summary")
    assert summary["converged"].dtype == bool and str(summary["label"].dtype) == "Int64"
    assert not store.verify()


def test_pickle_never_reaches_the_disk(store_dir):
    with StoreWriter(store_dir, "w") as w:
        with pytest.raises(ValueError):
            w.commit("0000000", "attribution", Record(arrays={"bad": np.array([{"a": 1}], dtype=object)}))
        assert not w.holds("0000000", "attribution")
    assert ResultStore(store_dir).count("attribution") == 0
    assert not (store_dir / "tmp" / "w").exists()  # the half-staged unit went with the writer


def test_a_unit_is_written_once(store_dir):
    rng = np.random.default_rng(1)
    with StoreWriter(store_dir, "a") as a, StoreWriter(store_dir, "b") as b:
        assert a.commit("0000001", "attribution", record(rng))
        assert not b.commit("0000001", "attribution", record(rng))  # b lost the race: a's unit stands
        with pytest.raises(StoreError, match="already writing"):
            StoreWriter(store_dir, "a")


def test_index_never_disagrees_with_the_files(store_dir):
    rng = np.random.default_rng(2)
    with StoreWriter(store_dir, "w") as w:
        for r in range(3):
            w.commit(doc_id_of(r), "attribution", record(rng, tokens=("x", "y")))
    db = store_dir / "index" / "w.sqlite"
    # a writer killed after the rename, before the insert: the unit is on disk but not indexed
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM entries WHERE doc_id = '0000001'")
        conn.execute("DELETE FROM attribution__by_token WHERE doc_id = '0000001'")
    # a unit deleted by hand: indexed but not on disk
    import shutil

    shutil.rmtree(store_dir / "docs" / "0000002" / "attribution")
    store = ResultStore(store_dir)
    assert store.doc_ids("attribution") == ["0000000", "0000001"]
    assert sorted(store.table("attribution", "by_token")["doc_id"].unique()) == ["0000000", "0000001"]
    direct = pd.concat([store.load(d, "attribution").tables["by_token"] for d in ("0000000", "0000001")])
    got = store.attribution_by_token_type()
    assert got.set_index("token")["total_attribution"].to_dict() == pytest.approx(
        direct.groupby("token")["attribution"].sum().to_dict())


def test_a_unit_indexed_twice_counts_once(store_dir):
    rng = np.random.default_rng(3)
    with StoreWriter(store_dir, "shard-0-of-1") as w:
        for r in range(4):
            w.commit(doc_id_of(r), "attribution", record(rng))
    with StoreWriter(store_dir, "shard-1-of-2") as w:  # the shard count changed between runs
        w.index_from_files("0000001", "attribution")
        w.index_from_files("0000003", "attribution")
    store = ResultStore(store_dir)
    assert len(store.table("attribution", "by_token")) == 4 * 3
    assert store.attribution_by_token_type()["n_docs"].tolist() == [4, 4, 4]


def test_damage_is_detected(store_dir):
    rng = np.random.default_rng(4)
    with StoreWriter(store_dir, "w") as w:
        w.commit("0000000", "attribution", record(rng))
        w.commit("0000001", "attribution", record(rng))
    unit0, unit1 = (store_dir / "docs" / d / "attribution" for d in ("0000000", "0000001"))
    data = (unit0 / "scores.npy").read_bytes()
    (unit0 / "scores.npy").write_bytes(data[:-8])  # truncated
    flipped = bytearray((unit1 / "by_token.parquet").read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF  # same size, other content
    (unit1 / "by_token.parquet").write_bytes(bytes(flipped))
    store = ResultStore(store_dir)
    with pytest.raises(CacheCorruptError, match="damaged"):
        store.load("0000000", "attribution")
    with pytest.raises(CacheCorruptError, match="damaged"):
        store.load("0000001", "attribution")
    problems = store.verify()
    assert len(problems) == 2 and all("run the same `longviz precompute` command again" in p for p in problems)


def test_manifest_refuses_to_mix(tmp_path):
    root = tmp_path / "s"
    first = open_manifest(root, manifest())
    on_disk = json.loads((root / "manifest.json").read_text())
    assert on_disk.pop("checksum") and on_disk == first
    assert open_manifest(root, manifest()) == first
    with pytest.raises(ManifestMismatchError, match="model fingerprint differs"):
        open_manifest(root, manifest(model="m2"))
    with pytest.raises(ManifestMismatchError, match="dataset fingerprint differs"):
        open_manifest(root, manifest(dataset="d2"))
    with pytest.raises(ManifestMismatchError, match="max_tokens differs"):
        open_manifest(root, manifest(max_tokens=128))
    with pytest.raises(ManifestMismatchError, match="n_steps: 4 vs 50"):
        open_manifest(root, manifest(kinds={"attribution": {"n_steps": 50}}))
    newer = dict(VERSIONS, torch="9.9")
    with pytest.raises(ManifestMismatchError, match="torch: 1.0 vs 9.9"):
        open_manifest(root, manifest(versions=newer))
    open_manifest(root, manifest(versions=newer), allow_version_change=True)
    # a new kind joins the manifest; the old kinds' settings stay
    merged = open_manifest(root, manifest(kinds={"attention": {"grid": 8}}))
    assert merged["kinds"] == {"attribution": {"n_steps": 4}, "attention": {"grid": 8}}
    store = ResultStore(root)
    assert store.matches("m1", "d1", 64) and not store.matches("m1", "d1", 128) and not store.matches("m2", "d1")
    with pytest.raises(StoreError, match="not a longviz result store"):
        ResultStore(tmp_path / "elsewhere")


# ------------------------------------------------------------------------------------------ aggregations
def _token_table_by_loop(docs: list[dict], min_docs: int = 1) -> dict:
    """Oracle of the dataset-wide table (issue 13 item 4) by plain loops: docs[i] maps a type to (summed score,
    occurrences) in document i; a type's mean is over ALL documents, 0 where it is absent."""
    out = {}
    for tok in sorted({t for d in docs for t in d}):
        total = magnitude = occ = present = 0
        for d in docs:
            s, c = d.get(tok, (0.0, 0))
            total, magnitude, occ, present = total + s, magnitude + abs(s), occ + c, present + (tok in d)
        if present >= min_docs:
            out[tok] = {"mean_attribution": total / len(docs), "n_docs": present, "occurrences": occ,
                        "mean_per_occurrence": total / occ, "total_attribution": total,
                        "magnitude": {"mean_attribution": magnitude / len(docs), "total_attribution": magnitude,
                                      "mean_per_occurrence": magnitude / occ}}
    return out


def test_combine_token_sums_is_a_mean_over_all_documents():
    rng = np.random.default_rng(5)
    docs = [{t: (float(rng.normal()), int(rng.integers(1, 4))) for t in rng.choice(list("abcdefg"), size=4,
                                                                                   replace=False)}
            for _ in range(6)]
    docs.append({"rare": (5.0, 1)})  # one large score in one document: 5 / 8, not 5
    docs.append({})  # a document whose every token is masked still counts
    rows = [{"token": t, "total_attribution": s, "n_docs": 1, "occurrences": c, "doc": i}
            for i, d in enumerate(docs) for t, (s, c) in d.items()]
    allrows = pd.DataFrame(rows)
    # two "indexes" holding different documents give partial sums that must combine to the same table
    parts = [d.groupby("token").agg(total_attribution=("total_attribution", "sum"), n_docs=("doc", "nunique"),
                                    occurrences=("occurrences", "sum")).reset_index()
             for d in (allrows[allrows["doc"] < 3], allrows[allrows["doc"] >= 3])]
    for partial in (pd.concat(parts, ignore_index=True), allrows.drop(columns="doc")):
        for min_docs in (1, 3):
            got = combine_token_sums(partial, len(docs), min_docs)
            want = _token_table_by_loop(docs, min_docs)
            assert list(got.columns) == TOKEN_TABLE_COLUMNS and sorted(got["token"]) == sorted(want)
            assert got["mean_attribution"].is_monotonic_decreasing
            for row in got.to_dict("records"):
                w = want[row["token"]]
                assert row["n_docs"] == w["n_docs"] and row["occurrences"] == w["occurrences"]
                for col, magnitude in w["magnitude"].items():
                    # two float64 sums of the same n terms in other orders differ by at most 2 n eps sum|terms|
                    assert abs(row[col] - w[col]) <= 2 * len(docs) * np.finfo(float).eps * magnitude
    got = combine_token_sums(allrows.drop(columns="doc"), len(docs)).set_index("token")
    assert got.loc["rare", "mean_attribution"] == 5.0 / 8 and got.loc["rare", "n_docs"] == 1
    assert "rare" not in set(combine_token_sums(allrows.drop(columns="doc"), len(docs), 2)["token"])
    empty = combine_token_sums(allrows.iloc[:0].drop(columns="doc"), 3)
    assert empty.empty and list(empty.columns) == TOKEN_TABLE_COLUMNS
    with pytest.raises(ValueError, match="n_documents"):
        combine_token_sums(allrows, 0)
    with pytest.raises(ValueError, match="min_docs"):
        combine_token_sums(allrows, 8, 0)
    with pytest.raises(ValueError, match="more than the 2"):
        combine_token_sums(allrows, 2)


def test_store_token_table_is_the_loop_over_its_documents(store_dir):
    """ResultStore.attribution_by_token_type against the loop oracle, from the stored per-document tables:
    types absent from some documents, a min_docs filter, the masked columns (a count of 0 = all masked)."""
    rng = np.random.default_rng(6)
    tokens = [("a", "b", "c"), ("a", "d"), ("b", "c", "d", "e")]
    records = [record(rng, t) for t in tokens]
    with StoreWriter(store_dir, "shard-0-of-2") as w0, StoreWriter(store_dir, "shard-1-of-2") as w1:
        for i, rec in enumerate(records):
            (w0, w1)[i % 2].commit(doc_id_of(i), "attribution", rec)
    store = ResultStore(store_dir)
    for masked in (False, True):
        value, count = ("attribution_unmasked", "count_unmasked") if masked else ("attribution", "count")
        docs = [{t: (v, c) for t, v, c in zip(r.tables["by_token"]["token"], r.tables["by_token"][value],
                                              r.tables["by_token"][count]) if c > 0} for r in records]
        for min_docs in (1, 2):
            got = store.attribution_by_token_type(masked=masked, min_docs=min_docs)
            want = _token_table_by_loop(docs, min_docs)
            assert sorted(got["token"]) == sorted(want)
            for row in got.to_dict("records"):
                w = want[row["token"]]
                assert (row["n_docs"], row["occurrences"]) == (w["n_docs"], w["occurrences"])
                for col, magnitude in w["magnitude"].items():  # SQL sums in its own order: see the test above
                    assert abs(row[col] - w[col]) <= 2 * len(docs) * np.finfo(float).eps * magnitude


def test_combine_head_means_skips_nan_like_nanmean():
    rng = np.random.default_rng(6)
    grids = rng.random((5, 2, 3))
    grids[0, 1, 2] = np.nan
    grids[:, 0, 0] = np.nan  # a head dead in every document
    rows = [{"layer": l, "head": h, "total": v, "n": 1} for g in grids for (l, h), v in np.ndenumerate(g)
            if not np.isnan(v)]
    got = combine_head_means(pd.DataFrame(rows), 2, 3)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanmean(grids, axis=0)
    np.testing.assert_allclose(got, want)
    assert np.isnan(got[0, 0])


def test_combine_set_counts_sums_and_sorts():
    partial = pd.DataFrame({"token": ["x", "y", "x", "z"], "a": [1, 0, 2, 1], "b": [0, 3, 0, 0], "c": [1, 0, 0, 1]})
    got = combine_set_counts(partial)
    assert got.to_dict("list") == {"token": ["x", "y", "z"], "attention only": [3, 0, 1],
                                   "attribution only": [0, 3, 0], "both": [1, 0, 1], "total": [4, 3, 2]}


def test_mean_arrays_matches_numpy_and_refuses_mixed_shapes():
    rng = np.random.default_rng(7)
    arrays = [rng.random((2, 3, 4)).astype(np.float32) for _ in range(5)]
    np.testing.assert_allclose(mean_arrays(iter(arrays)), np.mean(np.stack(arrays).astype(np.float64), axis=0),
                               rtol=1e-6)
    with pytest.raises(StoreError):
        mean_arrays([np.zeros(2), np.zeros(3)])
    with pytest.raises(StoreError):
        mean_arrays([])


def test_find_store_picks_the_matching_sub_directory(tmp_path):
    from longviz_core.dataset.stores import find_store

    open_manifest(tmp_path / "a", manifest(model="m1", dataset="d1"))
    open_manifest(tmp_path / "b", manifest(model="m2", dataset="d1"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "manifest.json").write_text("{ damaged")  # skipped, not fatal
    assert find_store(tmp_path, "m2", "d1").root == tmp_path / "b"
    assert find_store(tmp_path / "a", "m1", "d1", 64).root == tmp_path / "a"
    assert find_store(tmp_path, "m1", "d1", 128) is None and find_store(tmp_path / "nowhere", "m1", "d1") is None


def test_serves_checks_the_kind_and_its_dependencies_settings(store_dir):
    open_manifest(store_dir, manifest(kinds={"agreement": {"p": 0.99, "mask": ["special", "stopwords"]}}))
    with StoreWriter(store_dir, "w") as w:
        w.commit("0000000", "agreement", Record(tables={"rows": pd.DataFrame({"x": [1.0]})}))
    store = ResultStore(store_dir)
    assert store.serves("agreement", n_steps=4, p=0.99, mask=("stopwords", "special"))
    assert not store.serves("agreement", n_steps=50) and not store.serves("agreement", p=0.9)
    assert not store.serves("agreement", mask=["special"]) and not store.serves("agreement", colour="red")
    assert not store.serves("attribution", n_steps=4)  # in the manifest, but no document computed


def test_prune_stores_deletes_only_local_stores_not_written_for_days(tmp_path, capsys):
    """`longviz prune-stores --older-than DAYS`: a store whose newest file is older goes; one with any newer file
    (a store still written to) stays; --dry-run only lists."""
    import os
    import time

    from longviz_core.cli import main

    now, day = time.time(), 86400
    stores = tmp_path / "stores"
    ages = {"old": [10, 9], "recent": [10, 1], "fresh": [0]}  # each file's age in days
    for name, files in ages.items():
        for i, age in enumerate(files):
            f = stores / name / "docs" / f"{i}.npy"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"x")
            os.utime(f, (now - age * day, now - age * day))
        manifest = stores / name / "manifest.json"  # what makes a folder a store (prune deletes nothing else)
        manifest.write_text("{}")
        os.utime(manifest, (now - max(files) * day, now - max(files) * day))
        for folder in (stores / name / "docs", stores / name):
            os.utime(folder, (now - 20 * day, now - 20 * day))
    args = ["prune-stores", "--older-than", "7", "--cache-dir", str(tmp_path)]
    assert main([*args, "--dry-run"]) == 0
    assert capsys.readouterr().out.split() == [str(stores / "old")]
    assert sorted(p.name for p in stores.iterdir()) == ["fresh", "old", "recent"]
    assert main(args) == 0
    assert sorted(p.name for p in stores.iterdir()) == ["fresh", "recent"]
    assert main(["prune-stores", "--older-than", "0.5", "--cache-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in stores.iterdir()) == ["fresh"]
    assert main(["prune-stores", "--older-than", "-1", "--cache-dir", str(tmp_path)]) == 2
    assert "older_than_days" in capsys.readouterr().err
    assert main(["prune-stores", "--older-than", "1", "--cache-dir", str(tmp_path / "none")]) == 0



def test_a_waiting_writer_takes_over_when_the_other_is_done(store_dir):
    """wait=True (the app's in-process runs): the second writer of one shard waits, says so, and then reads
    and extends what the first wrote, instead of refusing."""
    import threading

    rng = np.random.default_rng(3)
    told, got = [], {}
    first = StoreWriter(store_dir, "a")
    first.commit("0000000", "attribution", record(rng))

    def second():
        with StoreWriter(store_dir, "a", wait=True, progress=lambda f, msg: told.append((f, msg))) as w:
            got["held"] = w.holds("0000000", "attribution")
            got["new"] = w.commit("0000001", "attribution", record(rng))

    waiting = threading.Thread(target=second)
    waiting.start()
    while len(told) < 2:  # it polled at least twice while the first held the lock
        waiting.join(0.05)
    assert not got and waiting.is_alive()
    first.close()
    waiting.join(10)
    assert not waiting.is_alive()
    assert got == {"held": True, "new": True}
    assert {msg for _f, msg in told} == {"Waiting for another session or process that is computing the same results"}
    assert ResultStore(store_dir).doc_ids("attribution") == ["0000000", "0000001"]


def test_a_stop_while_waiting_ends_the_wait_and_leaves_the_lock_free(store_dir):
    class Stopped(Exception):
        pass

    def stop(_f, _msg):
        raise Stopped

    with StoreWriter(store_dir, "a"):
        with pytest.raises(Stopped):
            StoreWriter(store_dir, "a", wait=True, progress=stop)
        with pytest.raises(StoreError, match="already writing"):  # without wait: the command line's refusal
            StoreWriter(store_dir, "a")
    with StoreWriter(store_dir, "a") as w:  # the stopped waiter holds nothing
        assert w.writer == "a"
