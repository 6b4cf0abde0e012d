"""docs/examples/quickstart.ipynb runs offline in a fresh kernel of this interpreter (nbclient, ipykernel), and what
it shows is what the core returns, computed again here: the prediction, every token's value in each overlay, the
attribution header, the deletion numbers and the leaderboard; its displays run and load nothing, its chart shows
through Altair's svg renderer, and the files it saves are what their suffixes say."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import longviz_core as lv
from longviz_core.dataset.leaderboard import summarise
from longviz_core.evaluation.faithfulness import faithfulness
from longviz_core.tokens import token_label
from support.displays import inert

pytestmark = pytest.mark.slow  # a kernel, the demo model and every step of the notebook: about half a minute

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "examples" / "quickstart.ipynb"
KERNEL = "longviz-quickstart-test"


@pytest.fixture(scope="module")
def executed(demo, tmp_path_factory):
    """The notebook executed in a folder of its own (it saves figures/ there), by a kernel spec that names this
    interpreter, found before any other (JUPYTER_PATH); Jupyter's and IPython's own folders are temporary too."""
    home = tmp_path_factory.mktemp("jupyter")
    spec = home / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "longviz test", "language": "python"}))
    work = tmp_path_factory.mktemp("quickstart")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JUPYTER_PATH", str(home))
        env.setenv("JUPYTER_RUNTIME_DIR", str(home / "runtime"))
        env.setenv("IPYTHONDIR", str(home / "ipython"))
        env.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        nb = nbformat.read(NOTEBOOK, as_version=4)
        NotebookClient(nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": str(work)}}).execute()
    return nb, work


def _result(nb, last_line: str) -> dict:
    """The execute_result data of the one code cell ending in `last_line`."""
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.strip().splitlines()[-1] == last_line]
    assert len(cells) == 1, last_line
    results = [o for o in cells[0].outputs if o.output_type == "execute_result"]
    assert len(results) == 1, cells[0].outputs
    return results[0]["data"]


@pytest.fixture(scope="module")
def core(demo_model):
    """The notebook's steps, computed here."""
    texts = lv.load_dataset("demo", id2label=demo_model.id2label)["text"]
    analysis = lv.analyze(demo_model, texts[0], max_tokens=256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 16 steps may not converge: the display says so
        fresh = lv.integrated_gradients(demo_model, analysis, n_steps=16, use_cache=False)
        cached = lv.integrated_gradients(demo_model, analysis, n_steps=16)  # the notebook's, the rankings' scores
    runs = lv.document_leaderboard(demo_model, analysis, ["grad_x_input", "att_x_grad", "rollout", "random"],
                                   seeds=(0, 1, 2), flip_bound=8)
    return {"analysis": analysis, "attribution": fresh,
            "gxi": lv.explain(demo_model, analysis, "grad_x_input"),
            "occlusion": lv.explain(demo_model, analysis, "occlusion", unit="sentence"),
            "deletion": faithfulness(demo_model, analysis, cached.scores, seeds=(0, 1, 2), flip_bound=8),
            "leaderboard": summarise(runs)}


def _tokens_and_values(shown, analysis, values):
    assert [s["title"].split(": ")[0] for _, s in sorted(shown.spans.items())] == [
        f"#{i} {token_label(t)}" for i, t in enumerate(analysis.tokens)]  # every token, in order
    np.testing.assert_allclose(shown.span_values(), values, rtol=1e-3, atol=1e-9)


def test_the_analysis_shows_the_prediction_and_the_received_attention(executed, core):
    a = core["analysis"]
    shown = inert(_result(executed[0], "analysis")["text/html"])
    assert f"Prediction: {a.prediction_words}" in shown.visible
    _tokens_and_values(shown, a, a.attention.received([a.attention.num_layers - 1]) / a.attention.num_heads)


def test_integrated_gradients_shows_the_cores_numbers(executed, core):
    a, attr = core["analysis"], core["attribution"]
    shown = inert(_result(executed[0], "attribution")["text/html"])
    header = shown.table(["True label", "Predicted label", "Attribution label", "Attribution score",
                          "F(x) − F(baseline)"])[0]
    assert header["Predicted label"] == f"{a.label_name(a.predicted)} ({a.probs[a.predicted]:.2f})"
    assert header["Attribution score"] == f"{attr.total:.2f}"
    assert header["F(x) − F(baseline)"] == (f"{attr.prob_input:.4f} − {attr.prob_baseline:.4f} = "
                                            f"{attr.expected:+.4f}")
    _tokens_and_values(shown, a, attr.scores)


@pytest.mark.parametrize(("last_line", "name"), [('lv.explain(model, analysis, "grad_x_input")', "gxi"),
                                                  ('lv.explain(model, analysis, "occlusion", unit="sentence")',
                                                   "occlusion")])
def test_the_explainers_show_the_cores_scores(executed, core, last_line, name):
    shown = inert(_result(executed[0], last_line)["text/html"])
    if name == "gxi":
        _tokens_and_values(shown, core["analysis"], core[name].scores)
        return
    # occlusion by sentence: a box per sentence with its score (its tokens' sum), one per special token (0)
    scores, spans = core[name].scores, lv.segment(core["analysis"], "sentence").spans
    want = [0.0] + [float(scores[a:b].sum()) for a, b in spans] + [0.0]
    np.testing.assert_allclose(shown.span_values(), want, rtol=1e-3, atol=1e-9)


def test_the_deletion_test_shows_the_cores_numbers(executed, core):
    want = core["deletion"].numbers()
    shown = inert(_result(executed[0], "deletion")["text/html"])
    rows = shown.table(["number", *want.index])
    assert [r["number"] for r in rows] == list(want.columns)
    for row in rows:
        for ranking in want.index:
            value = want.loc[ranking, row["number"]]
            assert row[ranking] == ("—" if np.isnan(value) else f"{value:.4f}"), (ranking, row["number"])
    assert len(shown.images) == 3  # AOPC, LOdds and first-flip charts


def test_the_leaderboard_shows_the_cores_numbers(executed, core):
    shown = inert(_result(executed[0], "summarise(runs)")["text/html"])
    rows = {r["method"]: r for r in shown.table(
        ["explainer", "method", "AOPC", "AOPC sd (seeds)", "LOdds", "LOdds sd (seeds)", "first flip", "flip rate",
         "seconds", "peak MB", "cost"])}
    table = core["leaderboard"]
    assert list(rows) == list(table["method"])  # sorted by AOPC, as the core sorts them
    for rec in table.to_dict("records"):
        assert (rows[rec["method"]]["AOPC"], rows[rec["method"]]["LOdds"]) == (f"{rec['aopc']:.4f}",
                                                                              f"{rec['lodds']:.4f}")


def test_the_chart_shows_through_altairs_svg_renderer_and_the_files_are_saved(executed):
    nb, work = executed
    assert set(_result(nb, "chart")) == {"image/svg+xml", "text/plain"}
    figures = work / "figures"
    assert sorted(p.name for p in figures.iterdir()) == ["aopc.png", "aopc.svg", "attribution.html",
                                                         "ig_overlay.html", "leaderboard.csv"]
    assert (figures / "aopc.svg").read_text().lstrip().startswith("<svg")
    assert (figures / "aopc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for page in ("attribution.html", "ig_overlay.html"):
        assert (figures / page).read_text().startswith("<!DOCTYPE html>")
    assert (figures / "leaderboard.csv").read_text(encoding="utf-8-sig").startswith("method,label,aopc")


def test_no_output_runs_or_loads_anything(executed):
    shown = [o["data"]["text/html"] for c in executed[0].cells if c.cell_type == "code" for o in c.outputs
             if "text/html" in o.get("data", {})]
    assert len(shown) == 6  # analysis, IG, two explainers, deletion, leaderboard
    for html in shown:
        inert(html)
