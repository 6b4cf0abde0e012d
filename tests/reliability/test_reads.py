"""Every file longviz parses, linked to an endless device, a pipe or grown past any sense: the hosted configuration,
a checkpoint's files, a head-importance file, the cache entries, the demo's marker (the store's files are in
test_store_identity). Each goes through the one bounded reader (_disk.read_file): a typed error naming the file,
or an entry recomputed; never a MemoryError or a read that does not end."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import longviz_core as lv
from longviz_core import _disk
from longviz_core.config import ConfigError, load_config
from longviz_core.evaluation.importance import HeadImportanceError, load_head_importance

traceback = pytest.mark.guards("traceback")
wrong = pytest.mark.guards("wrong")


def _put(path, what):
    """Replace `path` by `what`: a link to /dev/zero, a FIFO, a folder or a sparse file past every bound."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if what == "dev-zero":
        os.symlink("/dev/zero", path)
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "folder":
        path.mkdir()
    else:
        with open(path, "wb") as fh:
            fh.truncate(_disk.METADATA_BYTES + 1)


KINDS = ["dev-zero", "fifo", "folder", "huge"]
NOT_REGULAR = r"is not a regular file \(a device, socket or pipe\)"
FAULTS = {"dev-zero": NOT_REGULAR, "fifo": NOT_REGULAR, "folder": "is a folder, not a file",
          "huge": "is larger than 16 MiB"}


@traceback
@pytest.mark.parametrize("what", KINDS)
def test_the_one_reader_refuses_by_name(tmp_path, what):
    path = tmp_path / "f.json"
    _put(path, what)
    with pytest.raises(lv.CacheCorruptError, match=rf"^The f\.json {FAULTS[what]}; fix it\.$"):
        _disk.read_file(path, "The f.json", _disk.METADATA_BYTES, lv.CacheCorruptError, fix="fix it")


@traceback
def test_the_one_reader_refuses_a_link_where_links_are_not_the_callers(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    os.symlink(tmp_path / "real.json", tmp_path / "link.json")
    assert _disk.read_file(tmp_path / "link.json", "it", 10, ValueError) == b"{}"
    with pytest.raises(ValueError, match="symbolic link"):
        _disk.read_file(tmp_path / "link.json", "it", 10, ValueError, links=False)
    with pytest.raises(FileNotFoundError):  # absence is the caller's to say
        _disk.read_file(tmp_path / "none.json", "it", 10, ValueError)


@traceback
@pytest.mark.parametrize("what", KINDS)
def test_a_hosted_configuration_that_is_not_a_file_is_a_config_error(tmp_path, what):
    path = tmp_path / "longviz.toml"
    _put(path, what)
    with pytest.raises(ConfigError, match=f"configuration .* {FAULTS[what]}"):
        load_config(path)


CHECKPOINT_FILES = ["config.json", "tokenizer_config.json", "tokenizer.json", "vocab.json", "merges.txt"]


@traceback
@pytest.mark.parametrize("what", ["dev-zero", "fifo"])
@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_checkpoint_file_that_is_not_a_regular_file_is_a_model_load_error(tiny_longformer_dir, tmp_path, name,
                                                                            what):
    path = shutil.copytree(tiny_longformer_dir, tmp_path / "model")
    _put(path / name, what)
    with pytest.raises(lv.ModelLoadError, match=f"The {name} of '{path}' is not a regular file"):
        lv.load_model(str(path))


@traceback
@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_a_checkpoint_json_past_the_bound_is_a_model_load_error(tiny_longformer_dir, tmp_path, name):
    path = shutil.copytree(tiny_longformer_dir, tmp_path / "model")
    _put(path / name, "huge")
    with pytest.raises(lv.ModelLoadError, match=f"The {name} of .* is larger than 16 MiB"):
        lv.load_model(str(path))


@traceback
@pytest.mark.parametrize("name", ["tokenizer.json", "merges.txt", "vocab.txt", "spiece.model"])
def test_a_vocabulary_file_past_its_bound_is_a_model_load_error(tiny_longformer_dir, tmp_path, name):
    """A tokenizer file grown past any tokenizer's size (sparse: 256 MiB and one byte of zeros) is refused by name
    before tokenizers reads it whole; one exactly at the bound passes this check (what it holds is the
    tokenizer's own concern: zeros are no tokenizer)."""
    from longviz_core.model.loading import VOCABULARY_BYTES, _check_regular_files

    path = shutil.copytree(tiny_longformer_dir, tmp_path / "model")
    for size, refused in ((VOCABULARY_BYTES + 1, True), (VOCABULARY_BYTES, False)):
        with open(path / name, "wb") as fh:
            fh.truncate(size)
        if refused:
            with pytest.raises(lv.ModelLoadError, match=f"^The {name} of '{path}' is larger than 256 MiB, more than "
                                                         "any tokenizer holds; copy the checkpoint's own files"):
                lv.load_model(str(path))
        else:
            _check_regular_files(path, str(path))


@traceback
@pytest.mark.parametrize("what", KINDS)
def test_a_head_importance_file_that_is_not_a_file_is_refused_by_name(tmp_path, what):
    path = tmp_path / "importance.npy"
    _put(path, what)
    with pytest.raises(HeadImportanceError, match=FAULTS[what]):
        load_head_importance(str(path), 2, 2)


@wrong
@pytest.mark.parametrize("what", ["dev-zero", "fifo", "folder"])
def test_a_json_cache_entry_that_is_not_a_file_is_recomputed(tmp_path, what):
    store = _disk.JsonStore("flip-scans", tmp_path)
    store.put("k", {"flip": 3})
    _put(store.path("k"), what)
    assert store.get("k") is None
    if what != "folder":
        store.put("k", {"flip": 3})  # written over the link or pipe, not through it
        assert store.get("k") == {"flip": 3} and not store.path("k").is_symlink()


@wrong
def test_an_attribution_cache_entry_linked_to_dev_zero_is_recomputed(tiny_longformer, tmp_path):
    from longviz_core import attribution as ig
    from tiny import text_of

    analysis = lv.analyze(tiny_longformer, text_of(20), max_tokens=32)
    first = ig.integrated_gradients(tiny_longformer, analysis, n_steps=3, cache_dir=tmp_path)
    (entry,) = (tmp_path / "attributions").glob("*.npz")
    _put(entry, "dev-zero")
    assert ig.cached_attribution(tiny_longformer, analysis, n_steps=3, cache_dir=tmp_path) is None
    again = ig.integrated_gradients(tiny_longformer, analysis, n_steps=3, cache_dir=tmp_path)
    assert not again.from_cache
    np.testing.assert_array_equal(again.raw, first.raw)


@wrong
@pytest.mark.parametrize("name", ["COMPLETE", "metrics.json"])
def test_a_demo_file_linked_to_dev_zero_is_restored(tmp_path, name):
    from longviz_core.demo import ensure_demo, file_checksums

    demo = ensure_demo(cache_dir=tmp_path)
    good = file_checksums(demo.root)
    _put(demo.root / name, "dev-zero")
    again = ensure_demo(cache_dir=tmp_path)
    assert file_checksums(again.root) == good and again.metrics == demo.metrics
