"""Settings a precompute cannot run with are refused before the first byte is written: into a new --out nothing is
created, into an existing store its manifest is not touched, so the corrected command into the same --out works
(never "Refusing to mix results … settings differ" for a store that holds no such results)."""
from __future__ import annotations

import re

import pandas as pd
import pytest

import longviz_core as lv
from longviz_core.cli import main
from longviz_core.dataset.kinds import Settings
from longviz_core.dataset.run import precompute

misleading = pytest.mark.guards("misleading")
traceback = pytest.mark.guards("traceback")

# the tiny Longformer: 2 layers, 2 heads, 2 classes
BAD = {
    "target-past-the-classes": (["--what", "attribution", "--target", "7"], "target .*must be 0..1, got 7"),
    "target-of-the-leaderboard": (["--what", "leaderboard", "--explainers", "ig,random", "--target", "2"],
                                  "target .*must be 0..1, got 2"),
    "layer-range-past-the-layers": (["--what", "agreement", "--layer-range", "1-99"],
                                    r"layer_range \(0, 98\).*--layer-range 1-2"),
    "layer-range-one-past": (["--what", "agreement", "--layer-range", "3"], r"layer_range \(2, 2\)"),
    "layer-range-reversed": (["--what", "agreement", "--layer-range", "2-1"], "--layer-range 2-1: need"),
    "faithfulness-layers-past": (["--what", "faithfulness", "--faithfulness-layers", "2-5"],
                                 r"faithfulness_layers \(1, 2, 3, 4\).*--faithfulness-layers 1-2"),
    "grid-past-the-limit": (["--grid", "2000"], "grid .*1..1024"),
    "ig-method-unknown": (["--what", "attribution", "--ig-method", "simpson"], "method must be one of"),
    "mask-kind-unknown": (["--what", "agreement", "--mask", "numbers"], "unknown mask kind"),
    "rbo-p-one": (["--what", "agreement", "--rbo-p", "1"], "rbo_p must be in"),
    "top-zero": (["--what", "agreement", "--top", "0"], "top must be in"),
    "max-removed-two": (["--what", "faithfulness", "--max-removed", "2"], "max_removed .*must be"),
    "explainer-unknown": (["--what", "leaderboard", "--explainers", "lime"], "unknown explainer"),
    "kind-unknown": (["--what", "attentions"], "unknown kind"),
    "shard-past-the-shards": (["--shard", "2/2"], "need 0 <= i < N"),
}


@pytest.fixture()
def csv(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,label\nthe model learns attention over long documents,0\nthe data trains on results,1\n")
    return path


def _precompute(model_dir, csv, out, extra, capsys) -> tuple[int, str]:
    argv = ["precompute", "--model", str(model_dir), "--dataset", str(csv), "--out", str(out), "--max-tokens", "32",
            "--n-steps", "2", "--limit", "1", "--seeds", "2", "--threads", "1", *extra]
    rc = main(argv)
    return rc, capsys.readouterr().err


@misleading
@pytest.mark.parametrize("name", list(BAD))
def test_a_setting_the_run_cannot_use_is_refused_before_anything_is_written(tiny_longformer_dir, tmp_path, csv,
                                                                           capsys, name):
    extra, message = BAD[name]
    rc, err = _precompute(tiny_longformer_dir, csv, tmp_path / "s", extra, capsys)
    assert rc == 2 and err.splitlines()[-1].startswith("error: ") and "Traceback" not in err
    assert re.search(message, err), err
    assert not (tmp_path / "s").exists()


@misleading
@pytest.mark.parametrize("bad, good", [(["--target", "7"], ["--target", "1"]),
                                       (["--layer-range", "1-99"], ["--layer-range", "1-2"])],
                         ids=["target", "layer-range"])
@pytest.mark.parametrize("out", ["new", "a-store-already"])
def test_the_corrected_command_into_the_same_out_works(tiny_longformer_dir, tmp_path, csv, capsys, bad, good, out):
    what = ["--what", "attribution" if bad[0] == "--target" else "agreement"]
    store = tmp_path / "s"
    if out == "a-store-already":
        assert _precompute(tiny_longformer_dir, csv, store, [], capsys)[0] == 0  # attention
    before = (store / "manifest.json").read_bytes() if out == "a-store-already" else None
    rc, err = _precompute(tiny_longformer_dir, csv, store, what + bad, capsys)
    assert rc == 2 and bad[0] in err
    assert ((store / "manifest.json").read_bytes() if store.exists() else None) == before
    rc, err = _precompute(tiny_longformer_dir, csv, store, what + good, capsys)
    assert rc == 0 and "Refusing" not in err, err
    assert lv.ResultStore(store).count(what[1]) == 1


@traceback
def test_given_head_importance_of_another_shape_is_refused_before_anything_is_written(tiny_longformer, tmp_path):
    df = pd.DataFrame({"text": ["the model learns", "the data"], "label": [0, 1]})
    with pytest.raises(lv.SettingsError, match=r"shape \(3, 2\); this model has 2 layers x 2 heads"):
        precompute(tiny_longformer, df, tmp_path / "s", "head-importance",
                   Settings(max_tokens=32, importance_values=[[1.0, 2.0]] * 3))
    assert not (tmp_path / "s").exists()


@traceback
@pytest.mark.parametrize("grid", [0, 2.5, 10**6], ids=repr)
def test_a_grid_that_is_not_a_cell_count_is_refused_before_anything_is_written(tiny_longformer, tmp_path, grid):
    df = pd.DataFrame({"text": ["the model learns", "the data"], "label": [0, 1]})
    with pytest.raises(lv.LongvizError, match="grid"):
        precompute(tiny_longformer, df, tmp_path / "s", "attention", Settings(max_tokens=32, grid=grid))
    assert not (tmp_path / "s").exists()
