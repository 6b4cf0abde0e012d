"""AppTest drives the Explainers page and the attribution overlay's explainer choice on the demo; the page's
leaderboard equals the command line's (`python -m longviz_core leaderboard` in a subprocess), each computed afresh."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import longviz_core as lv
from pages._ui.common import K
from support.apps import ROOT, app_test, page

MAX_TOKENS = 128
METHODS = ["grad_x_input", "rollout", "gae", "random"]
pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _open(name: str, **state) -> AppTest:
    at = app_test()
    at.session_state[K.MAX_TOKENS] = MAX_TOKENS
    at.session_state[K.DOC_INDEX] = 0
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(page(name)).run()
    _ok(at)
    return at


def _cli(tmp_path, limit):
    out = tmp_path / f"leaderboard-{limit}.csv"
    done = subprocess.run(
        [sys.executable, "-m", "longviz_core", "leaderboard", "--model", "demo", "--dataset", "demo", "--limit",
         str(limit), "--max-tokens", str(MAX_TOKENS), "--methods", ",".join(METHODS), "--seeds", "5",
         "--max-removed", "0.2", "--cache-dir", str(tmp_path / f"cache-{limit}"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert "random" in done.stdout and "aopc" in done.stdout  # the table printed
    return pd.read_csv(out).set_index("method")


def _same(view: pd.DataFrame, cli: pd.DataFrame):
    view = view.set_index("method")
    assert set(view.index) == set(METHODS) == set(cli.index)
    for shown, column in [("AOPC", "aopc"), ("LOdds", "lodds"), ("first flip", "first_flip"),
                          ("AOPC sd (seeds)", "aopc_sd"), ("flip rate", "flip_rate")]:
        np.testing.assert_allclose(view.loc[cli.index, shown].to_numpy(float), cli[column].to_numpy(float),
                                   rtol=1e-6, atol=1e-9, equal_nan=True)
    assert view["explainer"].iloc[0].startswith("★ ")
    assert cli.loc["random", "runs"] == 5 and cli.loc["random", "aopc_sd"] > 0  # random: mean ± sd over 5 seeds


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["this document", "dataset"])
def test_page_leaderboard_equals_the_command_line(demo, tmp_path, scope):
    p = "explainers"
    at = _open(p, **{K.page(p, "methods"): METHODS, K.page(p, "seeds"): 5, K.page(p, "max_removed"): "20 %",
                     K.page(p, "scope"): scope, K.page(p, "docs"): 2})
    at.button(key=K.page(p, "run_dataset")).click().run()
    _ok(at)
    _same(at.dataframe[0].value, _cli(tmp_path, 1 if scope == "this document" else 2))
    assert any(s.value.startswith("Leaderboard") for s in at.subheader)
    if scope == "this document":
        assert any("agree" in s.value for s in at.subheader)


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
