"""Notebook displays (longviz_core.notebook): every result shows markup in its text as text, runs and loads
nothing, scrolls a long document in a bounded box and shows the numbers the core returns; the front door registers
them in an IPython kernel; lv.save writes figures and results through the exports."""
from __future__ import annotations

import base64
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core import export, notebook
from longviz_core.dataset.leaderboard import Leaderboard, summarise
from longviz_core.evaluation.deletion import removal_order
from longviz_core.figures.attention import grid_image
from longviz_core.figures.faithfulness import deletion_curves_chart
from longviz_core.figures.layout import OVERLAY_HEIGHT
from longviz_core.figures.text import token_overlay_html
from longviz_core.tokens import token_label
from longviz_core.views.masking import build_mask, special_tokens_of
from support.displays import inert

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = "</div><script>alert(1)</script>"
TEXT = (f"Neural networks learn {PAYLOAD} representations from data. Compilers parse source code into trees.\n\n"
        "A second paragraph about training deep models with gradient descent.")


@pytest.fixture(scope="module")
def results(demo_model, tmp_path_factory):
    model = demo_model
    analysis = lv.analyze(model, TEXT, max_tokens=128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # four steps do not converge: the display says so, tested below
        attribution = lv.integrated_gradients(model, analysis, n_steps=4,
                                              cache_dir=tmp_path_factory.mktemp("ig-cache"))
    explanation = lv.explain(model, analysis, "grad_x_input")
    enc = analysis.encoded
    # a ranking named by the payload: its name is shown in the table, the legend and the leaderboard
    deletion = lv.deletion_test(model, analysis, {PAYLOAD: removal_order(np.abs(attribution.scores), prefix=enc.prefix,
                                                                         suffix=enc.suffix)},
                                lv.DeletionSettings(seeds=(0, 1), flip_bound=4))
    runs = lv.document_leaderboard(model, analysis, [PAYLOAD, "random"], explanations={PAYLOAD: explanation},
                                   seeds=(0, 1), flip_bound=4)
    return {"analysis": analysis, "attribution": attribution, "explanation": explanation, "deletion": deletion,
            "leaderboard": summarise(runs)}


def _bare(text: str) -> str:
    return re.sub(r"\s", "", text)


@pytest.mark.parametrize("kind", ["analysis", "attribution", "explanation", "deletion", "leaderboard"])
def test_every_display_shows_markup_in_the_text_as_text(results, kind):
    shown = inert(notebook.html(results[kind]))
    assert "script" not in shown.tags
    assert _bare(PAYLOAD) in _bare(shown.visible)  # the tokens read, in order, as the text's characters
    charts = [base64.b64decode(src.split(",", 1)[1]).decode() for src in shown.images]
    assert not any("<script" in svg for svg in charts)
    if charts:  # the deletion curves' legend names the ranking, escaped by vl-convert's SVG
        assert any("&lt;/div&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in svg for svg in charts)


@pytest.mark.parametrize("kind", ["analysis", "attribution", "explanation"])
def test_an_overlay_scrolls_in_a_box_as_high_as_the_apps(results, kind):
    shown = inert(notebook.html(results[kind]))
    assert len(shown.boxes) == 1 and f"max-height:{OVERLAY_HEIGHT}px" in shown.boxes[0]
    assert sorted(shown.spans) == list(range(results["analysis"].n))  # every token, one box each


def test_the_analysis_shows_its_prediction_and_the_attention_received(results):
    a = results["analysis"]
    shown = inert(notebook.html(a))
    assert a.prediction_words in shown.visible
    last = a.attention.num_layers - 1
    received = a.attention.received(layers=[last]) / a.attention.num_heads  # the page's default: last layer, mean
    np.testing.assert_allclose(shown.span_values(), received, rtol=1e-3, atol=1e-12)
    masked = build_mask(a.tokens, special_tokens=special_tokens_of(a.encoded))
    assert [s["title"].endswith("(masked)") for _, s in sorted(shown.spans.items())] == list(masked)
    assert [s["title"].split(": ")[0] for _, s in sorted(shown.spans.items())] == [
        f"#{i} {token_label(t)}" for i, t in enumerate(a.tokens)]


def test_integrated_gradients_shows_its_header_overlay_and_top_tables(results):
    a, attr = results["analysis"], results["attribution"]
    shown = inert(notebook.html(attr))
    header = shown.table(["True label", "Predicted label", "Attribution label", "Attribution score",
                          "F(x) − F(baseline)"])[0]
    assert header["Attribution score"] == f"{attr.scores.sum():.2f}"
    assert header["F(x) − F(baseline)"] == (f"{attr.prob_input:.4f} − {attr.prob_baseline:.4f} = "
                                            f"{attr.prob_input - attr.prob_baseline:+.4f}")
    assert header["Predicted label"] == f"{a.label_name(a.predicted)} ({a.probs[a.predicted]:.2f})"
    for note in (attr.warning, attr.weak_explanation):  # shown as the page shows them, where they apply
        assert note is None or note in shown.visible
    np.testing.assert_allclose(shown.span_values(), attr.scores, rtol=1e-3, atol=1e-12)
    positive, negative = shown.tables_with(["token", "position", "attribution"])
    for rows, order in ((positive, np.argsort(-attr.scores, kind="stable")),
                        (negative, np.argsort(attr.scores, kind="stable"))):
        assert len(rows) == notebook.TOP
        assert rows == [{"token": token_label(a.tokens[i]), "position": str(i), "attribution": f"{attr.scores[i]:.4f}"}
                        for i in order[:notebook.TOP]]


def test_an_explanation_shows_its_explainer_and_its_scores(results):
    e = results["explanation"]
    shown = inert(notebook.html(e))
    header = shown.table(["Explainer", "True label", "Predicted label", "Class explained"])[0]
    assert header["Explainer"] == "Gradient × Input"
    np.testing.assert_allclose(shown.span_values(), e.scores, rtol=1e-3, atol=1e-12)


def test_a_deletion_result_shows_its_numbers_and_curves(results):
    result = results["deletion"]
    shown = inert(notebook.html(result))
    want = result.numbers()
    rows = shown.table(["number", PAYLOAD, "Random"])
    assert [r["number"] for r in rows] == list(want.columns)
    for row in rows:
        for ranking in (PAYLOAD, "Random"):
            value = want.loc[ranking, row["number"]]
            assert row[ranking] == ("—" if np.isnan(value) else f"{value:.4f}"), (ranking, row["number"])
    assert len(shown.images) == 3  # AOPC, LOdds, first flips


def test_a_leaderboard_shows_its_table(results):
    table = results["leaderboard"]
    assert isinstance(table, Leaderboard) and type(table.set_index("method")) is pd.DataFrame
    shown = inert(notebook.html(table))
    rows = {r["method"]: r for r in shown.table(
        ["explainer", "method", "AOPC", "AOPC sd (seeds)", "LOdds", "LOdds sd (seeds)", "first flip", "flip rate",
         "seconds", "peak MB", "cost"])}
    for rec in table.to_dict("records"):
        assert rows[rec["method"]]["AOPC"] == f"{rec['aopc']:.4f}"
        assert rows[rec["method"]]["LOdds"] == f"{rec['lodds']:.4f}"
    assert rows[PAYLOAD]["explainer"].endswith(PAYLOAD)


@pytest.fixture(scope="module")
def datasets(demo_model, tmp_path_factory):
    """The three dataset-wide results over two short documents of the demo, one holding the payload."""
    texts = [TEXT, "Gradient descent trains deep networks. Compilers emit machine code."]
    cache = tmp_path_factory.mktemp("dataset-store")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # four IG steps do not converge
        return {"attribution": lv.dataset_attributions(demo_model, texts, 0, n_steps=4, max_tokens=64,
                                                       cache_dir=cache),
                "agreement": lv.dataset_agreement(demo_model, texts, max_tokens=64, ig_steps=4, cache_dir=cache),
                "faithfulness": lv.dataset_faithfulness(demo_model, texts, max_tokens=64, ig_steps=4, seeds=(0, 1),
                                                        max_removed=0.1, cache_dir=cache)}


def _mean_sd(values) -> str:
    """'mean ± sd' over documents, population sd, NaN skipped: recomputed here from the per-document rows."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return f"{v.mean():.3f} ± {v.std():.3f}" if len(v) else "—"


@pytest.mark.parametrize("kind", ["attribution", "agreement", "faithfulness"])
def test_a_dataset_result_shows_itself_and_runs_nothing(datasets, kind):
    shown = inert(notebook.html(datasets[kind]))
    assert "script" not in shown.tags and "<script" not in shown.visible
    charts = [base64.b64decode(src.split(",", 1)[1]).decode() for src in shown.images]
    assert len(charts) == {"attribution": 0, "agreement": 0, "faithfulness": 3}[kind]  # AOPC, LOdds, flips
    assert not any("<script" in svg for svg in charts)


def test_dataset_attribution_shows_the_top_types_both_ways(datasets):
    result = datasets["attribution"]
    shown = inert(notebook.html(result))
    header = [c for c in result.table.columns]
    positive, negative = shown.tables_with(header)
    table = result.table
    for rows, want in ((positive, table[table["mean_attribution"] > 0].sort_values("mean_attribution",
                                                                                  ascending=False, kind="stable")),
                       (negative, table[table["mean_attribution"] < 0].sort_values("mean_attribution",
                                                                                  kind="stable"))):
        assert 0 < len(rows) <= notebook.TOP
        assert [r["token"] for r in rows] == list(want["token"].head(notebook.TOP))
        assert [r["mean_attribution"] for r in rows] == [f"{v:.4f}" for v in want["mean_attribution"].head(notebook.TOP)]
    assert f"over {result.n_docs:,} documents" in shown.visible and result.description() in shown.visible


def test_dataset_agreement_shows_tables_1_and_2_as_mean_and_sd_over_documents(datasets):
    from longviz_core.views.agreement import METRICS

    result = datasets["agreement"]
    shown = inert(notebook.html(result))
    labels = {m: METRICS[m]["label"] for m in ("cosine", "kendall_tau", "rbo", "jaccard_top")}
    first = ["Attention", "Scaled by head importance", "Masked", "Documents"]
    table_1 = shown.table(first + [labels[m] for m in ("cosine", "kendall_tau", "rbo")])
    table_2 = shown.table(first + [labels["jaccard_top"]])
    per_doc = result.per_document
    groups = list(per_doc.groupby(["source", "scaled", "masked"], sort=False))
    assert len(table_1) == len(table_2) == len(groups) > 0
    for row_1, row_2, ((source, scaled, masked), group) in zip(table_1, table_2, groups):
        assert (row_1["Attention"], row_1["Masked"]) == (str(source), str(masked))
        assert row_1["Scaled by head importance"] == ("yes" if scaled else "no")
        for m in ("cosine", "kendall_tau", "rbo"):
            assert row_1[labels[m]] == _mean_sd(group[m]), (source, masked, m)
        assert row_2[labels["jaccard_top"]] == _mean_sd(group["jaccard_top"])
    assert f"Mean ± std over {result.n_documents} documents" in shown.visible


def test_dataset_faithfulness_shows_its_summary_over_documents(datasets):
    result = datasets["faithfulness"]
    shown = inert(notebook.html(result))
    rows = shown.table(["ranking", "documents", "aopc", "aopc@10%", "lodds", "first_flip", "flipped", "no flip"])
    per_doc = result.per_document
    assert [r["ranking"] for r in rows] == list(dict.fromkeys(per_doc["ranking"]))
    for row in rows:
        docs = per_doc[per_doc["ranking"] == row["ranking"]]
        assert row["documents"] == str(len(docs)) == str(result.n_documents)
        for c in ("aopc", "aopc@10%", "lodds", "first_flip"):
            assert row[c] == _mean_sd(docs[c]), (row["ranking"], c)
        assert int(row["flipped"]) + int(row["no flip"]) == len(docs)
        assert row["flipped"] == str(int(docs["first_flip"].notna().sum()))
    assert result.max_removed == 0.1 and result.unit == "token"


def test_a_result_keeps_its_document_through_the_cache_and_says_when_it_has_none(results, demo_model, tmp_path):
    a, attr = results["analysis"], results["attribution"]
    assert attr.document == a.summary() and results["explanation"].document == a.summary()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = lv.integrated_gradients(demo_model, a, n_steps=4, cache_dir=tmp_path)
        again = lv.integrated_gradients(demo_model, a, n_steps=4, cache_dir=tmp_path)
        from_encoded = lv.integrated_gradients(demo_model, a.encoded, a.predicted, n_steps=4, cache_dir=tmp_path)
    assert again.from_cache and again.document == first.document == a.summary()
    assert from_encoded.document is None and np.array_equal(from_encoded.raw, first.raw)
    shown = inert(notebook.html(from_encoded))
    assert "attribute the DocumentAnalysis" in shown.visible and not shown.spans


def test_the_front_door_registers_the_displays_in_an_ipython_kernel():
    code = f"""
import sys
import numpy as np
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import longviz_core as lv
html = shell.display_formatter.formatters["text/html"]
print(sorted(html.deferred_printers))
print(sorted(m for m in ("torch", "pandas", "altair") if m in sys.modules))
from longviz_core.model.analysis import DocumentSummary
e = lv.Explanation("grad_x_input", 1, np.array([0.0, 0.5, -0.25, 0.0]), 0.1, None,
                   document=DocumentSummary(("<s>", "Ġa", "Ġ" + {PAYLOAD!r}, "</s>"), ("x", "y"), (0.3, 0.7), 1))
data, _ = shell.display_formatter.format(e)
print(sorted(data))
print(data["text/html"])
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    registered, loaded, mimes, html = done.stdout.split("\n", 3)
    assert registered == str(sorted([("longviz_core.model.analysis", "DocumentAnalysis"),
                                     ("longviz_core.attribution.ig", "Attribution"),
                                     ("longviz_core.attribution.explainers", "Explanation"),
                                     ("longviz_core.evaluation.deletion", "DeletionResult"),
                                     ("longviz_core.dataset.leaderboard", "Leaderboard"),
                                     ("longviz_core.dataset.aggregate", "DatasetAttribution"),
                                     ("longviz_core.dataset.aggregate", "DatasetAgreement"),
                                     ("longviz_core.dataset.aggregate", "DatasetFaithfulness")]))
    assert loaded == "[]"  # registered by name: nothing heavy imported until a result is shown
    assert mimes == "['text/html', 'text/plain']"
    shown = inert(html)
    assert [s["text"].strip() for _, s in sorted(shown.spans.items())] == ["<s>", "a", PAYLOAD, "</s>"]


def test_save_writes_figures_and_results_through_the_exports(results, tmp_path):
    chart = deletion_curves_chart(results["deletion"].long_curves(), "aopc")
    assert lv.save(chart, tmp_path / "c.svg").read_text().lstrip().startswith("<svg")
    assert lv.save(chart, tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    a = results["analysis"]
    page = lv.save(token_overlay_html(a.tokens, results["attribution"].scores), tmp_path / "o.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'data-pos="0"' in page
    page = lv.save(results["deletion"], tmp_path / "d.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and '<div class="lv-nb"' in page
    assert inert(page.split("<body", 1)[1].split(">", 1)[1].rsplit("</body>", 1)[0]).table(
        ["number", PAYLOAD, "Random"])  # the display's numbers table, its payload header escaped
    grid = grid_image(lv.normalised_maps(lv.pool_attention(a.attention, grid=8)))  # the heatmap grid's raster
    assert lv.save(grid, tmp_path / "g.png").read_bytes() == export.image_png(grid)
    csv = lv.save(results["leaderboard"], tmp_path / "l.csv").read_text(encoding="utf-8-sig")
    assert csv.splitlines()[0].startswith("method,label,aopc")
    with pytest.raises(lv.SettingsError, match=r"A chart saves as \.svg or \.png, not '\.html'"):
        lv.save(chart, tmp_path / "c.html")
    with pytest.raises(lv.SettingsError, match=r"A result saves as \.html"):
        lv.save(results["attribution"], tmp_path / "a.csv")
    with pytest.raises(lv.SettingsError, match="not a list"):
        lv.save([1, 2], tmp_path / "x.html")
    assert not (tmp_path / "c.html").exists() and not (tmp_path / "a.csv").exists()


def test_an_explanation_by_sentences_shows_each_sentence_with_its_score(results, demo_model):
    e = lv.explain(demo_model, results["analysis"], "occlusion", unit="sentence")
    shown = inert(notebook.html(e))
    # one box per sentence holding its score (the sum of its tokens'), and one per special token (0)
    spans = lv.segment(results["analysis"], "sentence").spans
    want = [0.0] + [float(e.scores[a:b].sum()) for a, b in spans] + [0.0]
    np.testing.assert_allclose(shown.span_values(), want, rtol=1e-3, atol=1e-12)
    assert "unit=sentence" in shown.visible


def test_a_display_of_anything_else_is_a_typed_error():
    with pytest.raises(lv.SettingsError, match="not a dict"):
        notebook.html({})
