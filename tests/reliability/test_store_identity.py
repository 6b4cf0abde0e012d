"""A store serves only its own results, and says what it cannot read: a unit copied or linked in from another store
(another model, dataset, max_tokens or settings), any file of a store replaced by a link (to another store, to
/dev/zero), a unit folder whose meta.json is missing or a folder, an index of another store. Each is refused on
the read path, listed by `store-info --verify` with a fix that works, and replaced by the next run; nothing is
written through a link."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core.cli import main
from longviz_core.dataset import store as st
from longviz_core.dataset.run import read_logs

wrong = pytest.mark.guards("wrong")
traceback = pytest.mark.guards("traceback")
loss = pytest.mark.guards("loss")
misleading = pytest.mark.guards("misleading")

MANIFEST = {"model": {"fingerprint": "model-a", "source": "a"}, "dataset": {"fingerprint": "data-a", "n_documents": 4},
            "max_tokens": 64, "kinds": {"attention": {"grid": 4}}, "versions": {}}
# another store's manifest, one identity field at a time
OTHER = {"another-model": {"model": {"fingerprint": "model-b", "source": "b"}},
         "another-dataset": {"dataset": {"fingerprint": "data-b", "n_documents": 4}},
         "another-max-tokens": {"max_tokens": 128},
         "other-settings": {"kinds": {"attention": {"grid": 8}}},
         "another-kind-too": {"kinds": {"attention": {"grid": 4}, "attribution": {"n_steps": 4}}}}
DOC = st.doc_id_of(2)


def _record(row: int, value: float) -> st.Record:
    return st.Record(arrays={"pooled": np.full((2, 2, 4, 4), value)},
                     tables={"document": pd.DataFrame({"row": [row], "prob_0": [value], "prob_1": [1 - value]})},
                     scalars={"row": row})


def _store(root, rows, value, manifest=MANIFEST, writer="w"):
    st.open_manifest(root, manifest)
    with st.StoreWriter(root, writer) as w:
        for row in rows:
            assert w.commit(st.doc_id_of(row), "attention", _record(row, value))
    return root


@pytest.fixture()
def ours(tmp_path):
    """This store: rows 0 and 1 computed (0.984 each), row 2 not yet."""
    return _store(tmp_path / "ours", [0, 1], 0.984)


@pytest.fixture()
def theirs(tmp_path):
    """Another model's store: rows 0..2 computed, with other numbers (1.0)."""
    return _store(tmp_path / "theirs", [0, 1, 2], 1.0, {**MANIFEST, **OTHER["another-model"]})


def _unit(root, doc=DOC):
    return root / "docs" / doc / "attention"


def _verify(root, capsys) -> tuple[int, str]:
    rc = main(["store-info", str(root), "--verify"])
    return rc, capsys.readouterr().err


# ====================================================================== a unit of another store
@wrong
@pytest.mark.parametrize("how", ["copied", "unit-linked", "document-linked", "meta-linked"])
def test_a_unit_of_another_models_store_is_not_served(ours, theirs, capsys, how):
    (ours / "docs" / DOC).mkdir()
    if how == "copied":
        shutil.copytree(_unit(theirs), _unit(ours))
    elif how == "unit-linked":
        os.symlink(_unit(theirs), _unit(ours))
    elif how == "document-linked":
        (ours / "docs" / DOC).rmdir()
        os.symlink(theirs / "docs" / DOC, ours / "docs" / DOC)
    else:
        _unit(ours).mkdir()
        for f in _unit(theirs).iterdir():
            (shutil.copyfile if f.name != "meta.json" else os.symlink)(f, _unit(ours) / f.name)
    store = st.ResultStore(ours)
    assert store.doc_ids("attention") == [st.doc_id_of(0), st.doc_id_of(1)]
    assert store.probs()["prob_0"].tolist() == [0.984, 0.984]  # row 2's [1.0, 0.0] is not among them
    with pytest.raises(lv.LongvizError, match="not this store's|symbolic link"):
        store.load(DOC, "attention")
    rc, err = _verify(ours, capsys)
    assert rc == 1 and "verify: 1 problem(s)" in err and DOC in err


@wrong
@pytest.mark.parametrize("other", list(OTHER))
def test_a_unit_computed_with_another_identity_is_refused(ours, tmp_path, other):
    """Each identity field on its own: model, dataset, max_tokens, a kind's settings, a kind this store lacks."""
    elsewhere = _store(tmp_path / "elsewhere", [2], 1.0, {**MANIFEST, **OTHER[other]})
    (ours / "docs" / DOC).mkdir()
    shutil.copytree(_unit(elsewhere), _unit(ours))
    store = st.ResultStore(ours)
    assert DOC not in store.doc_ids("attention")
    with pytest.raises(lv.CacheCorruptError, match=f"not this store's.*delete {_unit(ours)}"):
        store.load(DOC, "attention")


@wrong
def test_a_unit_of_this_store_that_replaced_its_own_is_refused_and_the_index_keeps_the_right_numbers(ours, theirs):
    shutil.rmtree(_unit(ours, st.doc_id_of(1)))
    shutil.copytree(_unit(theirs, st.doc_id_of(1)), _unit(ours, st.doc_id_of(1)))
    store = st.ResultStore(ours)
    assert store.probs()["prob_0"].tolist() == [0.984, 0.984]  # what this store indexed when it computed row 1
    with pytest.raises(lv.CacheCorruptError, match="another model"):
        store.load(st.doc_id_of(1), "attention")
    with pytest.raises(lv.CacheCorruptError, match="another model"):
        store.array(st.doc_id_of(1), "attention", "pooled")


@wrong
def test_a_unit_of_another_document_is_refused(ours):
    """A unit copied from row 0 to row 2 of the same store is row 0's results, not row 2's."""
    (ours / "docs" / DOC).mkdir()
    shutil.copytree(_unit(ours, st.doc_id_of(0)), _unit(ours))
    with pytest.raises(lv.CacheCorruptError, match="not this one"):
        st.ResultStore(ours).load(DOC, "attention")


@wrong
@pytest.mark.parametrize("how", ["copied", "meta-is-a-folder", "no-meta", "document-linked", "meta-to-dev-zero"])
def test_the_next_run_replaces_what_is_not_this_stores_unit(ours, theirs, how):
    """What precompute does for a unit the store does not hold: compute it and commit it, which replaces whatever
    stands in its place (never "Directory not empty"); the store then serves its own numbers for the row."""
    (ours / "docs" / DOC).mkdir()
    if how == "copied":
        shutil.copytree(_unit(theirs), _unit(ours))
    elif how == "meta-is-a-folder":
        (_unit(ours) / "meta.json" / "x").mkdir(parents=True)
    elif how == "no-meta":
        _unit(ours).mkdir()
        (_unit(ours) / "pooled.npy").write_bytes(b"left over")
    elif how == "document-linked":
        (ours / "docs" / DOC).rmdir()
        os.symlink(theirs / "docs" / DOC, ours / "docs" / DOC)
    else:
        _unit(ours).mkdir()
        os.symlink("/dev/zero", _unit(ours) / "meta.json")
    theirs_before = {p: p.read_bytes() for p in sorted(_unit(theirs).iterdir())}
    with st.StoreWriter(ours, "w") as w:
        assert not w.holds(DOC, "attention")
        assert w.commit(DOC, "attention", _record(2, 0.984))
        assert w.holds(DOC, "attention")
    store = st.ResultStore(ours)
    assert store.verify() == [] and store.probs()["prob_0"].tolist() == [0.984] * 3
    assert not (ours / "docs" / DOC).is_symlink()
    assert {p: p.read_bytes() for p in sorted(_unit(theirs).iterdir())} == theirs_before  # the link's target kept


@wrong
def test_a_unit_of_another_text_is_not_held(ours):
    with st.StoreWriter(ours, "w") as w:
        assert w.commit(DOC, "attention", _record(2, 0.5), text="the model learns")
        assert w.holds(DOC, "attention", "the model learns")
        assert not w.holds(DOC, "attention", "another text")
        assert w.commit(DOC, "attention", _record(2, 0.984), text="another text")  # replaced
    assert st.ResultStore(ours).load(DOC, "attention").tables["document"]["prob_0"].tolist() == [0.984]


# ====================================================================== every file of a store, linked or replaced
@wrong
@pytest.mark.parametrize("name", ["pooled.npy", "document.parquet"])
@pytest.mark.parametrize("target", ["theirs", "dev-zero"])
def test_a_unit_file_replaced_by_a_link_is_refused(ours, theirs, name, target):
    unit = _unit(ours, st.doc_id_of(1))
    (unit / name).unlink()
    os.symlink(_unit(theirs, st.doc_id_of(1)) / name if target == "theirs" else "/dev/zero", unit / name)
    with pytest.raises(lv.CacheCorruptError, match="symbolic link"):
        st.ResultStore(ours).load(st.doc_id_of(1), "attention")


@traceback
@pytest.mark.parametrize("what", ["link-to-dev-zero", "link-to-their-manifest", "folder", "fifo", "huge"])
def test_a_manifest_that_is_not_a_file_of_its_own_is_one_error_line(ours, theirs, capsys, what):
    manifest = ours / "manifest.json"
    manifest.unlink()
    if what == "link-to-dev-zero":
        os.symlink("/dev/zero", manifest)
    elif what == "link-to-their-manifest":
        os.symlink(theirs / "manifest.json", manifest)
    elif what == "folder":
        manifest.mkdir()
    elif what == "fifo":
        os.mkfifo(manifest)
    else:
        with open(manifest, "wb") as fh:
            fh.truncate(64 * 2**20)  # sparse: 64 MiB of zeros, past the bound of every metadata file
    for argv in (["store-info", str(ours)], ["store-info", str(ours), "--verify"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: The store manifest") and "Traceback" not in err and "MemoryError" not in err
    with pytest.raises(lv.CacheCorruptError, match="cannot be trusted"):
        st.ResultStore(ours)


@wrong
@pytest.mark.parametrize("how", ["copied-from-another-store", "linked-to-another-store"])
def test_an_index_of_another_store_is_not_served(ours, theirs, how):
    index = ours / "index" / "w.sqlite"
    for p in ours.glob("index/w.sqlite*"):
        p.unlink()
    if how == "copied-from-another-store":
        shutil.copyfile(theirs / "index" / "w.sqlite", index)
    else:
        os.symlink(theirs / "index" / "w.sqlite", index)
    store = st.ResultStore(ours)
    assert store.probs()["prob_0"].tolist() == [0.984, 0.984]  # indexed from this store's own unit files
    with st.StoreWriter(ours, "w") as w:  # the writer of that name starts an index of this store's own
        assert not w.indexed(st.doc_id_of(0), "attention")
        w.index_from_files(st.doc_id_of(0), "attention")
        assert w.indexed(st.doc_id_of(0), "attention")
    assert not index.is_symlink() and (theirs / "index" / "w.sqlite").is_file()


@wrong
def test_a_dataset_level_unit_of_another_store_is_refused(ours, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    st.open_manifest(elsewhere, {**MANIFEST, **OTHER["another-model"]})
    with st.StoreWriter(elsewhere, "w") as w:
        w.commit(None, "head-importance", st.Record(arrays={"importance": np.ones((2, 2))}))
    (ours / "dataset").mkdir(exist_ok=True)
    os.symlink(elsewhere / "dataset" / "head-importance", ours / "dataset" / "head-importance")
    store = st.ResultStore(ours)
    assert not store.has("head-importance") and store.head_importance() is None
    shutil.copytree(elsewhere / "dataset" / "head-importance", ours / "dataset" / "copied", symlinks=True)
    os.unlink(ours / "dataset" / "head-importance")
    os.rename(ours / "dataset" / "copied", ours / "dataset" / "head-importance")
    with pytest.raises(lv.CacheCorruptError, match="another model"):
        st.ResultStore(ours).head_importance()


# ====================================================================== verify: every unit folder it cannot read
BAD_FOLDERS = {
    "meta-is-a-folder": lambda u, o: (u / "meta.json" / "x").mkdir(parents=True),
    "no-meta": lambda u, o: (u / "pooled.npy").write_bytes(b"x"),
    "meta-to-dev-zero": lambda u, o: os.symlink("/dev/zero", u / "meta.json"),
    "meta-garbage": lambda u, o: (u / "meta.json").write_bytes(b"\x00garbage"),
    "another-models-unit": lambda u, o: (u.rmdir(), shutil.copytree(_unit(o), u)),
    "unit-is-a-link": lambda u, o: (u.rmdir(), os.symlink(_unit(o), u)),
    "unit-is-a-file": lambda u, o: (u.rmdir(), u.write_text("x")),
}


@misleading
@pytest.mark.parametrize("how", list(BAD_FOLDERS))
def test_verify_names_every_unit_folder_it_cannot_read_and_the_named_fix_works(ours, theirs, capsys, how):
    _unit(ours).mkdir(parents=True)
    BAD_FOLDERS[how](_unit(ours), theirs)
    rc, err = _verify(ours, capsys)
    assert rc == 1 and "verify: 1 problem(s)" in err and str(_unit(ours)) in err and "Traceback" not in err
    assert "run the same `longviz precompute` command again" in err
    # the fix as the message words it: remove what it names (the link itself, or the unit folder), rerun
    target = _unit(ours)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif (target / "meta.json").is_symlink():
        (target / "meta.json").unlink()
        shutil.rmtree(target)
    else:
        shutil.rmtree(target)
    with st.StoreWriter(ours, "w") as w:
        assert w.commit(DOC, "attention", _record(2, 0.984))
    rc, err = _verify(ours, capsys)
    assert rc == 0 and "verify: 0 problem(s)" in err


@misleading
def test_verify_counts_each_problem_once_and_lists_them_all(ours, theirs, capsys):
    for row, how in zip((2, 3), ("meta-is-a-folder", "unit-is-a-link")):
        _unit(ours, st.doc_id_of(row)).mkdir(parents=True)
        BAD_FOLDERS[how](_unit(ours, st.doc_id_of(row)), theirs)
    (ours / "docs" / "notes.txt").write_text("x")
    rc, err = _verify(ours, capsys)
    assert rc == 1 and "verify: 3 problem(s)" in err
    assert all(s in err for s in (st.doc_id_of(2), st.doc_id_of(3), "notes.txt"))


# ====================================================================== nothing written through a link
@loss
@pytest.mark.parametrize("folder", ["docs", "dataset", "index", "tmp"])
def test_a_writer_never_writes_through_a_linked_folder(ours, tmp_path, folder):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep me")
    shutil.rmtree(ours / folder, ignore_errors=True)
    os.symlink(elsewhere, ours / folder)
    with pytest.raises(lv.StoreError, match=f"{folder} is a symbolic link.*rm "):
        st.StoreWriter(ours, "w")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]


@loss
@pytest.mark.parametrize("name", [".manifest.lock", "tmp/w.lock", "log/w.jsonl"])
def test_a_lock_or_log_file_linked_elsewhere_is_never_written_through(ours, tmp_path, name):
    from longviz_core.dataset.run import _Log

    precious = tmp_path / "thesis.tex"
    precious.write_text("draft")
    (ours / name).parent.mkdir(exist_ok=True)
    (ours / name).unlink(missing_ok=True)
    os.symlink(precious, ours / name)
    with pytest.raises(OSError, match="symbolic link"):
        if name == ".manifest.lock":
            st.open_manifest(ours, MANIFEST)
        elif name == "tmp/w.lock":
            st.StoreWriter(ours, "w")
        else:
            _Log(ours, "w").write(DOC, "attention", 1.0)
    assert precious.read_text() == "draft"


@traceback
def test_a_log_linked_to_dev_zero_is_left_out_of_the_timings(ours):
    (ours / "log").mkdir()
    (ours / "log" / "ok.jsonl").write_text(json.dumps({"doc_id": DOC, "kind": "attention", "seconds": 1.5}) + "\n")
    os.symlink("/dev/zero", ours / "log" / "w.jsonl")
    assert read_logs(ours)["seconds"].tolist() == [1.5]


# ====================================================================== the command line, end to end
@wrong
def test_another_models_unit_is_not_served_and_the_rerun_computes_this_models(tiny_longformer_dir, tmp_path, capsys):
    """The issue's case: row 1 copied in from another model's store is neither counted nor served; verify names it;
    the same precompute then computes this model's numbers for it."""
    from tiny import make_tiny_longformer

    other_dir = make_tiny_longformer(tmp_path / "other-model", initializer_range=0.5, seed=1)
    csv = tmp_path / "d.csv"
    csv.write_text("text,label\nthe model learns attention,0\nthe data trains on results over long documents,1\n")

    def run(model, out, limit):
        return main(["precompute", "--model", str(model), "--dataset", str(csv), "--out", str(out),
                     "--max-tokens", "32", "--limit", str(limit), "--threads", "1"])

    assert run(tiny_longformer_dir, tmp_path / "ours", 1) == 0 and run(other_dir, tmp_path / "theirs", 2) == 0
    assert run(tiny_longformer_dir, tmp_path / "reference", 2) == 0
    shutil.copytree(tmp_path / "theirs" / "docs" / st.doc_id_of(1), tmp_path / "ours" / "docs" / st.doc_id_of(1))
    capsys.readouterr()
    store = st.ResultStore(tmp_path / "ours")
    assert store.doc_ids("attention") == [st.doc_id_of(0)] and len(store.probs()) == 1
    rc, err = _verify(tmp_path / "ours", capsys)
    assert rc == 1 and "verify: 1 problem(s)" in err and "another model" in err
    assert run(tiny_longformer_dir, tmp_path / "ours", 2) == 0
    rc, err = _verify(tmp_path / "ours", capsys)
    assert rc == 0 and "verify: 0 problem(s)" in err
    pd.testing.assert_frame_equal(st.ResultStore(tmp_path / "ours").probs(),
                                  st.ResultStore(tmp_path / "reference").probs())
    assert not st.ResultStore(tmp_path / "ours").probs().equals(st.ResultStore(tmp_path / "theirs").probs())
