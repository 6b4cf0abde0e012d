"""The command line with arguments it cannot use: a one-line `error:` and exit status 2, never a traceback, and
never a run that computes nothing and exits 0."""
from __future__ import annotations

import pytest

from longviz_core.cli import main

traceback = pytest.mark.guards("traceback")
wrong = pytest.mark.guards("wrong")

BAD = {
    "limit-negative": (["--limit", "-1"], "--limit"),
    "limit-zero": (["--limit", "0"], "--limit"),
    "limit-superscript": (["--limit", "²"], "--limit"),
    "limit-arabic-digits": (["--limit", "٣"], "--limit"),
    "max-tokens-nan": (["--max-tokens", "nan"], "--max-tokens"),
    "max-tokens-two": (["--max-tokens", "2"], "--max-tokens"),
    "threads-zero": (["--threads", "0"], "--threads"),
    "workers-negative": (["--workers", "-2"], "--workers"),
    "seeds-negative": (["--seeds", "-1"], "--seeds"),
    "grid-zero": (["--grid", "0"], "--grid"),
    "max-removed-nan": (["--max-removed", "nan"], "--max-removed"),
    "rbo-p-inf": (["--rbo-p", "inf"], "--rbo-p"),
    "device-cuda": (["--device", "cuda"], "CUDA"),
    "device-cuda-index": (["--device", "cuda:3"], "CUDA"),
    "device-unknown": (["--device", "gpu"], "device"),
    "dataset-folder": (["--dataset", "{tmp}"], "is a folder"),
    "dataset-dev-zero": (["--dataset", "/dev/zero"], "not a regular file"),
    "out-a-file": (["--out", "{tmp}/d.csv"], "is a file"),
}


@traceback
@pytest.mark.parametrize("name", list(BAD))
def test_bad_precompute_arguments_end_in_one_error_line(tiny_longformer_dir, tmp_path, capsys, name):
    import torch

    extra, message = BAD[name]
    if name.startswith("device-cuda") and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    (tmp_path / "d.csv").write_text("text,label\nthe model learns,0\nthe data,1\n")
    args = {"--model": str(tiny_longformer_dir), "--dataset": str(tmp_path / "d.csv"), "--out": str(tmp_path / "s"),
            "--max-tokens": "32"}
    args.update(dict(zip(extra[::2], (v.format(tmp=tmp_path) for v in extra[1::2]))))
    try:
        rc = main(["precompute", *(x for kv in args.items() for x in kv)])
    except SystemExit as exc:  # argparse's usage error
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and message in err and "Traceback" not in err
    assert not (tmp_path / "s").exists() or name == "out-a-file"


@traceback
@pytest.mark.parametrize("argv", [["store-info", "{tmp}/d.csv"], ["store-info", "/dev/zero"],
                                  ["prune-stores", "--older-than", "nan"], ["prune-stores", "--older-than", "-1"],
                                  ["leaderboard", "--model", "demo", "--dataset", "demo", "--limit", "-1"]],
                         ids=["store-info-file", "store-info-device", "prune-nan", "prune-negative",
                              "leaderboard-limit"])
def test_other_commands_refuse_in_one_line(tmp_path, capsys, argv):
    (tmp_path / "d.csv").write_text("x")
    try:
        rc = main([a.format(tmp=tmp_path) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and "error" in err and "Traceback" not in err
