"""Folders that are not stores: `precompute --out` refuses a file and a non-empty folder that is not a store
(nothing in it is touched), `prune-stores` deletes only stores (symlinks, files and other folders stay, and it
does not stop at them), and the demo never deletes a folder holding files that are not the demo's."""
from __future__ import annotations

import json
import os
import time

import pytest

from longviz_core.cli import main
from longviz_core.dataset import folders

loss = pytest.mark.guards("loss")
traceback = pytest.mark.guards("traceback")


def _snapshot(root):
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


def _not_stores(tmp_path):
    """Folders and files a user may mistype as --out, by name: (path, what the message says)."""
    out = {}
    for name, entries in {"a-file-in-it": {"thesis.tex": "draft"}, "a-hidden-file": {".bashrc": "x"},
                          "a-subfolder": {"data/train.csv": "text,label\n"},
                          "store-like-names-only-partly": {"docs/notes.md": "x", "README": "x"}}.items():
        for rel, text in entries.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text(text)
        out[name] = (tmp_path / name, "not empty and is not a longviz result store")
    (tmp_path / "a-file").write_text("precious")
    out["a-file"] = (tmp_path / "a-file", "is a file")
    os.symlink(tmp_path / "a-file", tmp_path / "a-link-to-a-file")
    out["a-link-to-a-file"] = (tmp_path / "a-link-to-a-file", "is a file")
    os.symlink(tmp_path / "a-file-in-it", tmp_path / "a-link-to-a-folder")
    out["a-link-to-a-folder"] = (tmp_path / "a-link-to-a-folder", "not empty and is not")
    return out


NOT_STORES = ["a-file-in-it", "a-hidden-file", "a-subfolder", "store-like-names-only-partly", "a-file",
              "a-link-to-a-file", "a-link-to-a-folder"]


@loss
@pytest.mark.parametrize("name", NOT_STORES)
def test_precompute_refuses_an_out_that_is_not_a_store_and_touches_nothing(tiny_longformer_dir, tmp_path, capsys,
                                                                         name):
    out, message = _not_stores(tmp_path / "w")[name]
    (tmp_path / "d.csv").write_text("text,label\nthe model learns,0\nthe data,1\n")
    before = _snapshot(tmp_path / "w")
    rc = main(["precompute", "--model", str(tiny_longformer_dir), "--dataset", str(tmp_path / "d.csv"),
               "--out", str(out), "--max-tokens", "32"])
    assert rc == 2 and message in capsys.readouterr().err
    assert _snapshot(tmp_path / "w") == before


@loss
@pytest.mark.parametrize("state", ["new", "empty", "store-being-created", "store"])
def test_a_new_or_empty_folder_or_a_store_is_accepted(tmp_path, state):
    target = tmp_path / "out"
    if state != "new":
        target.mkdir()
    if state == "store-being-created":
        (target / ".manifest.lock").write_text("")
    if state == "store":
        (target / "manifest.json").write_text(json.dumps({"format": 1}))
        (target / "docs").mkdir()
    assert folders.check_store_target(target) == target


def _old(path, days=10):
    t = time.time() - days * 86400
    for p in [path, *path.rglob("*")]:
        os.utime(p, (t, t), follow_symlinks=False)


@loss
def test_prune_deletes_old_stores_only_and_does_not_stop_at_what_is_not_one(tmp_path, capsys):
    stores = tmp_path / "cache" / "stores"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "store").mkdir(parents=True)
    (elsewhere / "store" / "manifest.json").write_text("{}")  # a store outside the cache, linked into it
    (elsewhere / "thesis.tex").write_text("draft")
    for name in ("a-old-store", "z-old-store"):
        (stores / name / "docs").mkdir(parents=True)
        (stores / name / "manifest.json").write_text("{}")
    (stores / "not-a-store").mkdir()
    (stores / "not-a-store" / "results.csv").write_text("keep me")
    (stores / "empty-folder").mkdir()
    (stores / "a-file").write_text("keep me")
    os.symlink(elsewhere / "store", stores / "b-link-to-a-store")
    os.symlink(elsewhere, stores / "c-link-to-a-folder")
    os.symlink(tmp_path / "nowhere", stores / "d-dangling-link")
    for p in stores.iterdir():
        _old(p)
    kept_before = _snapshot(elsewhere)
    rc = main(["prune-stores", "--older-than", "1", "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    assert sorted(p.name for p in stores.iterdir()) == ["a-file", "b-link-to-a-store", "c-link-to-a-folder",
                                                       "d-dangling-link", "empty-folder", "not-a-store"]
    assert (stores / "not-a-store" / "results.csv").read_text() == "keep me"
    assert _snapshot(elsewhere) == kept_before
    assert "deleted 2 local store(s)" in capsys.readouterr().err


@loss
@pytest.mark.parametrize("content", ["a-store", "other-files"])
def test_the_demo_never_deletes_a_folder_holding_what_is_not_the_demo(demo, tmp_path, content):
    from longviz_core.demo import DEMO_VERSION, ensure_demo

    root = tmp_path / f"demo-{DEMO_VERSION}"
    root.mkdir()
    if content == "a-store":
        (root / "manifest.json").write_text("{}")
        (root / "docs" / "0").mkdir(parents=True)
        (root / "docs" / "0" / "meta.json").write_text("{}")
    else:
        (root / "metrics.json").write_text("{}")  # a demo's name, and files that are not the demo's
        (root / "my-notes.txt").write_text("keep me")
    before = _snapshot(root)
    made = ensure_demo(tmp_path)
    assert made.root == root and (root / "model" / "config.json").is_file()
    (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith(f"demo-{DEMO_VERSION}.kept-")]
    assert _snapshot(kept) == before
