"""The explainer leaderboard: its deletion numbers against brute-force forwards and the Faithfulness page's own
deletion test, its summary against hand computation, random averaged over seeds, the agreement matrix against
scipy / rbo, the store kind 'leaderboard' (its runs, the local store, settings, resume), and explainers that know the answer ranking above random on the demo."""
from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import rbo
import scipy.stats
import torch

import longviz_core as lv
from longviz_core.cli import main
from longviz_core.dataset import leaderboard as lb
from longviz_core.dataset import api, run, stores
from longviz_core.dataset.kinds import KINDS
from longviz_core.dataset.store import ResultStore, doc_id_of
from longviz_core.figures import explainers as fig
from longviz_core.figures.faithfulness import deletion_curves_chart, flip_chart
from longviz_core.evaluation import faithfulness as fa
from longviz_core.evaluation.deletion import k_label, metric_columns
from support.oracles import assert_stores_equal
from tiny import text_of

SEEDS = (0, 1, 2, 3, 4)


@pytest.fixture(scope="module")
def doc(tiny_longformer):
    return lv.analyze(tiny_longformer, text_of(40), max_tokens=64)


def _brute_force(model, analysis, order, ks=fa.KS):
    """p(y | x with order[:c] replaced by <mask>) one forward at a time, every count c = 0 .. m."""
    enc = analysis.encoded
    logp = []
    for c in range(len(order) + 1):
        ids = enc.input_ids.copy()
        ids[order[:c]] = model.tokenizer.mask_token_id
        inputs = {**enc.torch_inputs(model.device), "input_ids": torch.as_tensor(ids)[None]}
        with torch.no_grad():
            logp.append(torch.log_softmax(model.model(**inputs).logits[0].double(), -1).numpy())
    logp = np.array(logp)  # (m + 1, classes)
    y = int(np.argmax(logp[0]))
    m = len(order)
    counts = [fa.removed_count(k, m) for k in ks]
    aopc = np.exp(logp[0, y]) - np.exp(logp[counts, y])
    lodds = logp[counts, y] - logp[0, y]
    flipped = np.flatnonzero(np.argmax(logp[1:], axis=1) != y)
    first = (flipped[0] + 1) / m if flipped.size else math.nan
    return aopc, lodds, first


def _row_numbers(row, ks=fa.KS):
    return (np.array([row[f"aopc@{k_label(k)}"] for k in ks]), np.array([row[f"lodds@{k_label(k)}"] for k in ks]),
            row["first_flip"])


def test_runs_against_brute_force_deletion(tiny_longformer, doc):
    """Signed and magnitude rankings of Gradient × Input, and rollout, against unbatched forwards of the deleted
    copies: AOPC(k), LOdds(k), the first flip (float32 probabilities: rtol 1e-5)."""
    for rank_by in lb.RANK_BY:
        runs = lb.document_leaderboard(tiny_longformer, doc, ["grad_x_input", "rollout"], rank_by=rank_by)
        assert list(runs.columns) == lb.run_columns()
        for row in runs.to_dict("records"):
            scores = lv.explain(tiny_longformer, doc, row["method"]).scores
            key = np.abs(scores) if rank_by == "magnitude" else scores
            order = np.argsort(-key[1:-1], kind="stable") + 1
            aopc, lodds, first = _brute_force(tiny_longformer, doc, order)
            got = _row_numbers(row)
            np.testing.assert_allclose(got[0], aopc, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[1], lodds, rtol=1e-5, atol=1e-6)
            assert (math.isnan(first) and math.isnan(got[2])) or got[2] == first
            assert row["aopc"] == pytest.approx(aopc.mean(), rel=1e-5, abs=1e-6)
            assert row["predicted"] == doc.predicted and row["target"] == doc.predicted and row["n"] == doc.n
            assert row["seconds"] >= 0 and row["label"] == lv.EXPLAINERS[row["method"]].label


def test_runs_equal_the_faithfulness_deletion_test(tiny_longformer, doc, tmp_path):
    """|IG| (rank_by='magnitude') and the random seeds give the Faithfulness page's numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ig = lv.explain(tiny_longformer, doc, "ig", n_steps=8, cache_dir=tmp_path)
        runs = lb.document_leaderboard(tiny_longformer, doc, ["ig", "random"], rank_by="magnitude",
                                       options={"ig": {"n_steps": 8, "cache_dir": tmp_path}}, seeds=SEEDS)
    ref = fa.faithfulness(tiny_longformer, doc, ig.scores, rankings=("ig", "random"), seeds=SEEDS)
    table = ref.table().set_index("ranking")
    ig_row = runs[runs["method"] == "ig"].iloc[0]
    for c in metric_columns():
        assert ig_row[c] == pytest.approx(table.loc["|IG|", c], rel=1e-5, abs=1e-7)
    random = runs[runs["method"] == "random"]
    assert list(random["seed"]) == list(SEEDS)
    for row, curve in zip(random.to_dict("records"), ref.random.runs):
        np.testing.assert_allclose(_row_numbers(row)[0], curve.aopc_k, rtol=1e-5, atol=1e-7)
    summary = lb.summarise(runs).set_index("method")
    # random: the mean and population sd over its seeds, as the Faithfulness page's random row
    assert summary.loc["random", "aopc"] == pytest.approx(table.loc["Random", "aopc"], rel=1e-5, abs=1e-7)
    assert summary.loc["random", "aopc_sd"] == pytest.approx(table.loc["Random", "aopc_sd"], rel=1e-4, abs=1e-7)
    assert summary.loc["random", "runs"] == len(SEEDS)
    assert math.isnan(summary.loc["ig", "aopc_sd"])


def test_summarise_against_hand_computation():
    """Two documents, one explainer and random with three seeds; NaN first flips are 'no flip'."""
    ks = (0.1, 0.5)
    rows = []
    rng = np.random.default_rng(0)
    for doc in (0, 1):
        for method, seed in [("gae", math.nan), ("random", 0), ("random", 1), ("random", 2)]:
            values = rng.normal(size=6)
            rows.append({"doc": doc, "method": method, "label": method, "seed": seed,
                         **dict(zip(metric_columns(ks), values)), "first_flip": math.nan if seed == 1 else rng.random(),
                         "seconds": rng.random(), "peak_bytes": float(rng.integers(1, 100))})
    runs = pd.DataFrame(rows)
    table = lb.summarise(runs, ks).set_index("method")
    gae, rnd = runs[runs.method == "gae"], runs[runs.method == "random"]
    assert table.loc["gae", "aopc"] == pytest.approx(gae["aopc"].sum() / 2)
    assert table.loc["gae", "first_flip"] == pytest.approx(gae["first_flip"].sum() / 2)
    per_seed = [rnd[rnd.seed == s]["lodds"].mean() for s in (0, 1, 2)]
    assert table.loc["random", "lodds"] == pytest.approx(np.mean(per_seed))
    assert table.loc["random", "lodds_sd"] == pytest.approx(np.sqrt(np.mean((per_seed - np.mean(per_seed)) ** 2)))
    flips = [rnd[rnd.seed == s]["first_flip"].mean() for s in (0, 2)]  # seed 1 never flipped
    assert table.loc["random", "first_flip"] == pytest.approx(np.mean(flips))
    assert table.loc["random", "flip_rate"] == pytest.approx(4 / 6)
    assert table.loc["gae", "peak_bytes"] == gae["peak_bytes"].max()
    assert table.loc["random", "documents"] == 2 and table.loc["random", "runs"] == 3
    ordered = lb.summarise(runs, ks)
    assert list(ordered["aopc"]) == sorted(ordered["aopc"], reverse=True)
    assert list(ordered["best"]) == [True, False]


TEXTS = [text_of(30), text_of(45), text_of(23)]
METHODS = ["ig", "grad_x_input", "gae", "random"]
OPTIONS = {"ig": {"n_steps": 4}}


def _settings(**changes):
    kwargs = dict(max_tokens=64, seeds=(0, 1, 2), max_removed=0.5, options=OPTIONS)
    return run.leaderboard_settings(METHODS, **{**kwargs, **changes})


def _cost_free(runs: pd.DataFrame) -> pd.DataFrame:
    return runs.drop(columns=["seconds", "peak_bytes", "deletion_seconds"])


def test_store_kind_holds_document_leaderboard(tiny_longformer, tmp_path):
    """The store kind 'leaderboard': each document's runs are document_leaderboard's on that document (computed
    here directly, IG afresh), its manifest records every setting, and the store's aggregation is every run
    with its doc."""
    df = pd.DataFrame({"text": TEXTS})
    settings = _settings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = run.precompute(tiny_longformer, df, tmp_path / "store", "leaderboard", settings)
    assert summary.kinds == ("leaderboard",) and summary.computed == {"leaderboard": 3}
    store = ResultStore(tmp_path / "store")
    recorded = store.settings("leaderboard")
    assert recorded["methods"] == METHODS and recorded["seeds"] == [0, 1, 2] and recorded["max_removed"] == 0.5
    assert recorded["ig"]["n_steps"] == 4 and recorded["rank_by"] == "signed" and recorded["target"] == "predicted"
    runs = store.leaderboard_runs()
    assert list(runs.columns) == ["doc", *lb.run_columns()] and list(runs["doc"].unique()) == [0, 1, 2]
    for i, text in enumerate(TEXTS):
        analysis = lv.analyze(tiny_longformer, text, 64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = lb.document_leaderboard(tiny_longformer, analysis, METHODS, seeds=(0, 1, 2), max_removed=0.5,
                                          options={"ig": {"n_steps": 4, "use_cache": False}})
        got = runs[runs["doc"] == i].drop(columns="doc").reset_index(drop=True)
        assert len(got) == 3 + 3 and got["n"].iloc[0] == analysis.n
        pd.testing.assert_frame_equal(_cost_free(got), _cost_free(ref), rtol=1e-9, atol=1e-12)
        assert (got["seconds"] >= 0).all()


def test_dataset_leaderboard_through_the_local_store(tiny_longformer, tmp_path):
    """api.leaderboard_runs / lv.leaderboard: the kind into the local store (a second call computes nothing), the
    front door's columns, the summary of the store's runs; other settings make another store."""
    kwargs = dict(max_tokens=64, seeds=(0, 1, 2), max_removed=0.5, options=OPTIONS, cache_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs, found = api.leaderboard_runs(tiny_longformer, TEXTS[:2], METHODS, **kwargs)
        assert found == 0 and set(runs["doc"]) == {0, 1} and len(runs) == 2 * (3 + 3)
        again, found = api.leaderboard_runs(tiny_longformer, TEXTS[:2], METHODS, **kwargs)
        assert found == 2
        pd.testing.assert_frame_equal(runs, again)  # read from the store: the cost too
        table = lv.leaderboard(tiny_longformer, TEXTS[:2], METHODS, **kwargs)
        assert list(table.columns[:6]) == ["method", "label", "aopc", "lodds", "first_flip", "seconds"]
        pd.testing.assert_frame_equal(table, lb.summarise(runs))
        _, found = api.leaderboard_runs(tiny_longformer, TEXTS[:2], METHODS, **{**kwargs, "seeds": (0, 1)})
    assert found == 0  # the seeds are part of the store's settings
    assert len(list((tmp_path / "stores").iterdir())) == 2


def test_store_with_other_settings_is_not_served(tiny_longformer, tmp_path):
    df = pd.DataFrame({"text": TEXTS[:1]})
    settings = _settings()
    run.precompute(tiny_longformer, df, tmp_path / "store", "leaderboard", settings)
    store = ResultStore(tmp_path / "store")
    assert stores.serves_view(store, "leaderboard", settings)
    for changes in [dict(seeds=(0, 1)), dict(max_removed=0.2), dict(rank_by="magnitude"), dict(replacement="pad"),
                    dict(options={"ig": {"n_steps": 6}}), dict(ks=(0.1, 0.5)), dict(target=0)]:
        assert not stores.serves_view(store, "leaderboard", _settings(**changes)), changes
    assert not stores.serves_view(store, "leaderboard", run.leaderboard_settings(["gae", "random"], max_tokens=64,
                                                                              seeds=(0, 1, 2), max_removed=0.5))
    with pytest.raises(lv.ManifestMismatchError):
        run.precompute(tiny_longformer, df, tmp_path / "store", "leaderboard", _settings(seeds=(0, 1)))
    without_ig = run.leaderboard_settings(["gae", "random"], max_tokens=64, seeds=(0, 1, 2))
    # IG's steps change nothing when IG is not chosen, nor the seeds when random is not
    assert KINDS["leaderboard"].settings(without_ig) == KINDS["leaderboard"].settings(replace(without_ig, n_steps=9))
    gae = run.leaderboard_settings(["gae"], max_tokens=64)
    assert KINDS["leaderboard"].settings(gae) == KINDS["leaderboard"].settings(replace(gae, seeds=()))


def test_settings_only_another_kind_uses(tiny_longformer, tmp_path):
    """Faithfulness without random takes no seeds, which the leaderboard's default explainers (random among them)
    reject: its local store is still found; a leaderboard run with them is refused before a manifest is written."""
    df = pd.DataFrame({"text": TEXTS[:1]})
    no_seeds = run.Settings(max_tokens=64, rankings=("ig",), seeds=())
    assert stores.local_store_dir(tiny_longformer, df, no_seeds, tmp_path) != stores.local_store_dir(
        tiny_longformer, df, run.Settings(max_tokens=64, rankings=("ig",)), tmp_path)
    with pytest.raises(ValueError, match="seed"):
        run.precompute(tiny_longformer, df, tmp_path / "store", "leaderboard", no_seeds)
    assert not (tmp_path / "store" / "manifest.json").exists()


def test_a_stopped_leaderboard_resumes_to_the_uninterrupted_store(tiny_longformer, tmp_path):
    """Stopped after the second document (the progress callback raises, as the app's Stop does), then run again:
    the store of one uninterrupted run, each document computed once."""
    df = pd.DataFrame({"text": TEXTS})
    settings = _settings(options={"ig": {"n_steps": 2}})

    class Stop(Exception):
        pass

    def stop_after_two(fraction, message):
        if message.startswith("document 2/"):
            raise Stop

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Stop):
            stores.local_store(tiny_longformer, df, "leaderboard", settings, progress=stop_after_two, cache_dir=tmp_path)
        done = stores.local_store(tiny_longformer, df, "leaderboard", settings, cache_dir=tmp_path)
        assert sorted(run.read_logs(done.root)["doc_id"]) == [doc_id_of(r) for r in range(3)]
        run.precompute(tiny_longformer, df, tmp_path / "whole", "leaderboard", settings)
    assert_stores_equal(done.root, tmp_path / "whole", rtol=1e-9, atol=1e-12)


def test_agreement_matrix_against_scipy_and_rbo(tiny_longformer, doc):
    explanations = {m: lv.explain(tiny_longformer, doc, m) for m in ("grad_x_input", "rollout", "gae", "random")}
    tau = lb.agreement_matrix(explanations, "kendall_tau")
    overlap = lb.agreement_matrix(explanations, "rbo", p=0.9)
    for a in explanations:
        for b in explanations:
            x, y = explanations[a].scores[1:-1], explanations[b].scores[1:-1]
            assert tau.loc[a, b] == pytest.approx(scipy.stats.kendalltau(x, y).statistic, abs=1e-12)
            ref = rbo.RankingSimilarity(np.argsort(-x, kind="stable").tolist(),
                                        np.argsort(-y, kind="stable").tolist()).rbo(p=0.9, ext=True)
            assert overlap.loc[a, b] == pytest.approx(ref, abs=1e-12)
    assert np.allclose(np.diag(tau), 1) and np.allclose(np.diag(overlap), 1)
    with pytest.raises(lb.LeaderboardError, match="two"):
        lb.agreement_matrix({"gae": explanations["gae"]})
    chart = fig.agreement_heatmap(tau, "kendall_tau").to_dict()
    assert chart["title"] == "Agreement between explainers: Kendall τ-b of their token rankings"
    assert fig.agreement_heatmap(tau, "rbo", unit="sentence").to_dict()["title"].endswith("of their sentence rankings")


def test_figures_from_runs(tiny_longformer, doc):
    runs = lb.document_leaderboard(tiny_longformer, doc, ["gae", "random"], seeds=(0, 1, 2))
    curves = lb.curves(runs)
    assert len(curves) == 2 * len(fa.KS)
    rnd = curves[curves["ranking"] == "Random"]
    assert (rnd["aopc_hi"] - rnd["aopc_lo"] >= 0).all() and curves[curves["ranking"] == "GAE"]["aopc_sd"].isna().all()
    for metric in ("aopc", "lodds"):
        spec = deletion_curves_chart(curves, metric).to_dict()
        x = spec["layer"][-1]["encoding"]["x"]  # the axis ends where the curves do: the largest k, 50 %
        assert x["scale"]["domain"] == [0, max(fa.KS)] and x["axis"]["values"] == [0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert flip_chart(lb.flips(runs)).to_dict()
    view = fig.leaderboard_view(lb.summarise(runs))
    assert view["explainer"].iloc[0].startswith("★ ") and not view["explainer"].iloc[1].startswith("★")
    seeds = runs[runs["method"] == "random"]  # the floor in words: the mean and population sd over the seeds
    floor = fig.random_floor(view)
    assert f"AOPC {seeds['aopc'].mean():.3f} ± {seeds['aopc'].std(ddof=0):.3f}" in floor
    assert f"LOdds {seeds['lodds'].mean():.3f} ± {seeds['lodds'].std(ddof=0):.3f}" in floor
    assert "not run" in fig.random_floor(view[view["method"] != "random"])
    # a first flip shows as its fraction to 4 decimals, a method that never flips as "no flip" (never None / NaN)
    table = lb.summarise(runs).assign(first_flip=[0.123456, math.nan])
    assert list(fig.leaderboard_view(table)["first flip"]) == ["0.1235", fig.NO_FLIP]
    assert "no flip. Peak" in fig.random_floor(fig.leaderboard_view(table.assign(method=["gae", "random"])))
    # every number in parts: AOPC and LOdds per explainer and k, flips and cost, random's sds over its seeds (by
    # hand from the runs)
    parts = fig.every_number(table)
    assert list(parts) == ["AOPC", "LOdds", "flips and cost", "sd over seeds"]
    aopc = parts["AOPC"].set_index("explainer")
    assert list(aopc.index) == list(table["label"]) and list(aopc.columns) == ["1%", "5%", "10%", "20%", "50%", "mean"]
    for k in aopc.columns[:-1]:
        assert aopc.loc["Random", k] == pytest.approx(seeds[f"aopc@{k}"].mean(), abs=1e-12)
    gae = runs[runs["method"] == "gae"].iloc[0]
    assert parts["LOdds"].set_index("explainer").loc["GAE", "mean"] == pytest.approx(gae["lodds"], abs=1e-12)
    sds = parts["sd over seeds"].set_index("number")
    assert list(sds.columns) == ["Random"]  # a deterministic explainer has no sd over seeds
    assert sds.loc["aopc@10%", "Random"] == pytest.approx(seeds["aopc@10%"].std(ddof=0), abs=1e-12)
    flips = parts["flips and cost"].set_index("explainer")
    assert list(flips["first flip"]) == ["0.1235", fig.NO_FLIP] and flips.loc["Random", "runs"] == 3
    scores = fig.scores_table(doc.tokens, {"gae": lv.explain(tiny_longformer, doc, "gae")})
    assert list(scores.columns) == ["position", "token", "gae"] and len(scores) == doc.n
    header = fig.explainer_header_html("GAE", "Chefer et al.", "class_1", "class_0", 0.7, None)
    assert "GAE" in header and "Class explained" in header


def test_bad_settings_are_clear_errors(tiny_longformer, doc, capsys):
    for kwargs, message in [({"methods": []}, "at least one"), ({"methods": ["lime"]}, "unknown"),
                            ({"methods": ["gae", "gae"]}, "twice"), ({"rank_by": "abs"}, "rank_by"),
                            ({"replacement": "unk"}, "replacement"),
                            ({"methods": ["gae"], "options": {"ig": {}}}, "not chosen")]:
        with pytest.raises(lb.LeaderboardError, match=message):
            lb.document_leaderboard(tiny_longformer, doc, **kwargs)
    with pytest.raises(lb.LeaderboardError, match="No documents"):
        lv.leaderboard(tiny_longformer, [], ["gae"])
    # the command line asks for random's five seeds at least, before loading anything
    assert main(["leaderboard", "--model", "demo", "--dataset", "demo", "--seeds", str(lb.MIN_SEEDS - 1)]) == 2
    assert f"at least {lb.MIN_SEEDS}" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ acceptance
def _planted(model, analysis) -> lv.Explanation:
    """An explainer that knows the answer: 1 on the tokens of words only the predicted class's papers use (the
    demo corpus's class vocabulary, stopwords and shared words left out), 0 elsewhere."""
    from longviz_core.demo.corpus import _VOCAB
    from longviz_core.tokens import normalise_tokens
    from longviz_core.views.masking import english_stopwords

    def words(label):
        return {w.lower() for phrases in _VOCAB[label].values() for p in phrases for w in p.split()}

    y = analysis.predicted
    planted = words(y) - words(1 - y) - english_stopwords()
    scores = np.array([t in planted for t in normalise_tokens(analysis.tokens)], dtype=np.float64)
    assert scores.sum() > 10
    return lv.Explanation("planted class words", y, scores, 0.0, None)


def test_explainers_that_know_the_answer_beat_random(demo_model, demo_dataset):
    """Acceptance: on a demo paper whose decision can flip (an artificial-intelligence paper: its planted class
    words gone, what is left reads as the other class, although an all-<mask> document gets this one), deleting
    the planted class words, or the top Gradient × Input tokens, lowers p(y) more than any random deletion: AOPC
    above random's mean + 3 sd over five seeds, and the decision flips earlier."""
    text = demo_dataset[demo_dataset["label"] == 1]["text"].iloc[0]
    analysis = lv.analyze(demo_model, text, 256)
    assert analysis.predicted == 1
    runs = lb.document_leaderboard(demo_model, analysis, ["planted class words", "grad_x_input", "random"],
                                   explanations={"planted class words": _planted(demo_model, analysis)},
                                   seeds=SEEDS, max_removed=0.3)
    table = lb.summarise(runs).set_index("method")
    floor = table.loc["random", "aopc"] + 3 * table.loc["random", "aopc_sd"]
    random_flip = table.loc["random", "first_flip"] if table.loc["random", "flip_rate"] == 1 else 1.0
    for method in ("planted class words", "grad_x_input"):
        assert table.loc[method, "aopc"] > floor, table
        assert table.loc[method, "first_flip"] < random_flip, table
    assert table.iloc[0]["best"] and table.index[0] != "random"


def test_the_leaderboard_knows_no_faithfulness_ranking():
    """The leaderboard hands every explainer's order to the one deletion engine under its own name: it imports
    nothing from the Faithfulness page's module and names none of its rankings."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(lb.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "evaluation.faithfulness" not in imported and "evaluation.deletion_engine" in imported
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & {"attention", "ig_x_attention"} and "random" in strings
