"""AppTest drives the Explainers page and the attribution overlay's explainer choice on the demo; the page's
leaderboard (this document: its own run; the dataset: the shared "compute for the dataset" flow into the local
store) equals the command line's (`python -m longviz_core leaderboard` in a subprocess, its own cache), each
computed afresh; a precomputed store (`longviz precompute --what leaderboard`) serves the page only for its own
settings."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from streamlit.testing.v1 import AppTest

import longviz_core as lv
from longviz_core import _disk
from longviz_core.dataset import leaderboard as lb
from longviz_core.dataset.store import ResultStore
from longviz_core.figures.explainers import NO_FLIP, flip_text
from pages._ui import ig
from pages._ui.keys import K
from support.apps import ROOT, open_page, settle

MAX_TOKENS, STEPS, DOCS = 64, 4, 2  # every number is recomputed three or four times, with full scans
METHODS = ["ig", "grad_x_input", "gae", "random"]
P = "explainers"
pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _open(name: str, **state) -> AppTest:
    at = open_page(name, MAX_TOKENS, **{K.DOC_INDEX: 0, **state})
    _ok(at)
    return at


@pytest.fixture()
def private_cache(tmp_path, monkeypatch):
    """The page's local stores and its IG and flip-scan caches in a fresh folder (the demo model stays in the
    shared cache), and IG's steps capped at STEPS, so the page computes everything itself, quickly."""
    real = _disk.cache_folder
    monkeypatch.setattr(_disk, "cache_folder",
                        lambda name, cache_dir=None: real(name, cache_dir) if cache_dir else tmp_path / name)
    monkeypatch.setattr(ig, "max_ig_steps", lambda: STEPS)
    monkeypatch.delenv("LONGVIZ_STORE_DIR", raising=False)
    return tmp_path


def _cli(tmp_path, command: str, limit: int, *extra):
    """The command line in a subprocess on this process's threads (so IG is bit for bit)."""
    common_args = ["--model", "demo", "--dataset", "demo", "--limit", str(limit), "--max-tokens", str(MAX_TOKENS),
                   "--seeds", "5", "--threads", str(torch.get_num_threads())]
    return subprocess.run([sys.executable, "-m", "longviz_core", command, *common_args, *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _leaderboard_cli(tmp_path, limit, *extra):
    out = tmp_path / f"leaderboard-{limit}.csv"
    done = _cli(tmp_path, "leaderboard", limit, "--methods", ",".join(METHODS), "--ig-steps", str(STEPS),
                "--cache-dir", str(tmp_path / f"cache-{limit}"), "--out", str(out), *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "random" in done.stdout and "aopc" in done.stdout  # the table printed
    return pd.read_csv(out).set_index("method")


def _same(view: pd.DataFrame, cli: pd.DataFrame):
    view = view.set_index("method")
    assert set(view.index) == set(METHODS) == set(cli.index)
    for shown, column in [("AOPC", "aopc"), ("LOdds", "lodds"), ("AOPC sd (seeds)", "aopc_sd"),
                          ("flip rate", "flip_rate")]:
        np.testing.assert_allclose(view.loc[cli.index, shown].to_numpy(float), cli[column].to_numpy(float),
                                   rtol=1e-6, atol=1e-9, equal_nan=True)
    shown = view.loc[cli.index, "first flip"]  # 4 decimals, "no flip …" where there is none
    assert list(shown.str.startswith(NO_FLIP)) == list(cli["first_flip"].isna())
    np.testing.assert_allclose(pd.to_numeric(shown, errors="coerce").to_numpy(float), cli["first_flip"].to_numpy(),
                               atol=5e-5, equal_nan=True)
    assert view["explainer"].iloc[0].startswith("★ ")
    assert cli.loc["random", "runs"] == 5 and cli.loc["random", "aopc_sd"] > 0  # random: mean ± sd over 5 seeds


def _state(scope: str) -> dict:
    return {K.page(P, "methods"): METHODS, K.page(P, "seeds"): 5,
            K.page(P, "scope"): scope, K.page(P, "docs"): DOCS, K.page(P, "steps"): f"{STEPS} steps (this server's limit)"}


@pytest.mark.slow
def test_document_leaderboard_equals_the_command_line(demo, private_cache, tmp_path):
    at = _open(P, **_state("this document"))
    at.button(key=K.page(P, "run")).click().run()
    _ok(at)
    # the curves first: the leaderboard's AOPC and LOdds, its charts, the flips said to be on their way
    first = at.dataframe[0].value
    assert list(first["first flip"].unique()) == ["…"] and first["AOPC"].notna().all()
    assert any("tokens: scanning" in c.value for c in at.caption) and at.get("vega_lite_chart")
    settle(at)
    _ok(at)
    cli = _leaderboard_cli(tmp_path, 1, "--flip-bound", str(lb.dl.FLIP_BOUND))  # the page's second stage
    _same(at.dataframe[0].value, cli)
    # "Every number" in parts: the flips (no empty cell for "no flip") and AOPC at each k, a row per explainer
    frames = [d.value for d in at.dataframe]
    flips = next(f for f in frames if "first flip" in f and "method" not in f).set_index("explainer")
    labels = cli["label"]  # the explainers as the leaderboard names them
    assert [flips.loc[labels[m], "first flip"] for m in cli.index] == [
        flip_text(v, w, short=True) for v, w in zip(cli["first_flip"], cli["no_flip_within"])]
    aopc = next(f for f in frames if list(f.columns)[-1] == "mean" and "10%" in f).set_index("explainer")
    np.testing.assert_allclose([aopc.loc[labels[m], "mean"] for m in cli.index], cli["aopc"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose([aopc.loc[labels[m], "10%"] for m in cli.index], cli["aopc@10%"], rtol=1e-6,
                               atol=1e-9)
    runs = next(f for f in frames if "seed" in f)["first_flip"]  # the runs tab: a number or "no flip …", never blank
    assert runs.notna().all() and (pd.to_numeric(runs, errors="coerce").notna() | runs.str.startswith(NO_FLIP)).all()
    # the flips still open are offered to the exact scan, with the copies it may take
    assert any(b.key == K.page(P, "exact") for b in at.button) == cli["no_flip_within"].notna().any()
    assert any(s.value.startswith("Leaderboard") for s in at.subheader)
    assert any("agree" in s.value for s in at.subheader)


@pytest.mark.slow
def test_dataset_leaderboard_through_the_dataset_buttons_equals_the_command_line(demo, demo_model, demo_dataset,
                                                                                private_cache, tmp_path, monkeypatch):
    """The dataset scope: the shared flow's compute button fills the local store for the first DOCS documents;
    its leaderboard equals the command line's. A store precomputed with these settings (`longviz precompute --what
    leaderboard`) holds document_leaderboard's runs on each document, is then served as it is, and not for other
    settings."""
    at = _open(P, **_state("dataset"))
    assert any("0 of the first 2 documents" in i.value and "Integrated Gradients alone takes up to about" in i.value
               for i in at.info), [i.value for i in at.info]  # IG is among METHODS: its estimate before any run
    at.button(key=K.page(P, "run_dataset")).click().run()
    _ok(at)
    assert any(f"{DOCS} of the first {DOCS} documents" in c.value and "local result store" in c.value
               for c in at.caption), [c.value for c in at.caption]
    assert any(s.value == f"Leaderboard over {DOCS} documents" for s in at.subheader)
    view = at.dataframe[0].value
    _same(view, _leaderboard_cli(tmp_path, DOCS))

    store = tmp_path / "precomputed" / "demo-leaderboard"
    done = _cli(tmp_path, "precompute", DOCS, "--what", "leaderboard", "--explainers", ",".join(METHODS), "--n-steps",
                str(STEPS), "--out", str(store))
    assert done.returncode == 0, done.stderr[-3000:]
    first = ResultStore(store).leaderboard_runs().query("doc == 0").drop(columns="doc").reset_index(drop=True)
    analysis = lv.analyze(demo_model, demo_dataset["text"].iloc[0], MAX_TOKENS)
    direct = lb.document_leaderboard(demo_model, analysis, METHODS, seeds=range(5),
                                     options={"ig": {"n_steps": STEPS, "use_cache": False}})
    cost = ["seconds", "peak_bytes", "deletion_seconds"]
    pd.testing.assert_frame_equal(first.drop(columns=cost), direct.drop(columns=cost), rtol=1e-9, atol=1e-12)
    monkeypatch.setenv("LONGVIZ_STORE_DIR", str(tmp_path / "precomputed"))
    fresh = _open(P, **_state("dataset"))
    read = f"{DOCS} of 60 documents, read from the result store {store}"
    assert any(read in c.value for c in fresh.caption), [c.value for c in fresh.caption]
    pd.testing.assert_frame_equal(fresh.dataframe[0].value.drop(columns=["seconds", "peak MB"]),
                                  view.drop(columns=["seconds", "peak MB"]), rtol=1e-6, atol=1e-9)
    fresh.number_input(key=K.page(P, "seeds")).set_value(6).run()
    _ok(fresh)
    assert not any("read from the result store" in c.value for c in fresh.caption)
    assert any(b.key == K.page(P, "run_dataset") for b in fresh.button)  # computed in the app instead


def test_attribution_overlay_names_its_explainer(demo):
    at = _open("attribution", **{K.page("attribution", "steps"): "50 steps (quick)"})
    buttons = [b for b in at.button if b.key == K.page("attribution", "run")]
    if buttons:
        buttons[0].click().run()
        _ok(at)
    for method in ("gae", "rollout"):
        at.selectbox(key=K.page("attribution", "explainer")).set_value(method).run()
        _ok(at)
        label = lv.EXPLAINERS[method].label
        assert any(f"Overlay: {label}" in c.value for c in at.caption)
        html = [e.value for e in at.main if type(e).__name__ == "Html"]
        assert any("Explainer" in h and label in h for h in html)  # the header above the overlay
        assert any(f"{label} scores for" in h for h in html)  # the legend
