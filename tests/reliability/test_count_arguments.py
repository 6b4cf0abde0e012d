"""Counts and fractions at the front door (issue 29, class 5): every count, index, seed, limit and fraction a public
function or settings class takes, given NaN, infinity, 2.5, -1, True or "3", ends in a typed LongvizError naming
the argument and what it accepts: nothing is rounded (2.5 read as 2), read from text or from a bool, or raised
untyped (NaN's ValueError, infinity's OverflowError). A whole float such as 2.0 is that count."""
from __future__ import annotations

import io
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core.dataset.kinds import Settings
from longviz_core.evaluation.faithfulness import faithfulness
from tiny import text_of

traceback = pytest.mark.guards("traceback")
wrong = pytest.mark.guards("wrong")

# NaN, infinity, -1 and text ended in untyped errors or odd messages; 2.5 and True were read as 2 and 1
NOT_COUNTS = [pytest.param(math.nan, id="nan", marks=traceback), pytest.param(math.inf, id="inf", marks=traceback),
              pytest.param(-1, id="-1", marks=traceback), pytest.param("3", id="'3'", marks=traceback),
              pytest.param(2.5, id="2.5", marks=wrong), pytest.param(True, id="True", marks=wrong)]
NOT_FRACTIONS = NOT_COUNTS  # 2.5 and -1 lie outside (0, 1] too
NOT_REALS = [p for p in NOT_COUNTS if p.id not in ("-1", "2.5")]  # a threshold may be -1 or 2.5
TEXT = text_of(30)


@pytest.fixture(scope="module")
def doc(tiny_longformer, tmp_path_factory):
    model = tiny_longformer
    a = lv.analyze(model, TEXT, max_tokens=32)
    ig = lv.integrated_gradients(model, a, n_steps=4, use_cache=False)
    buf = io.BytesIO()
    np.save(buf, np.ones((model.num_layers, model.num_heads)))
    return SimpleNamespace(model=model, a=a, scores=ig.scores, counts=lv.token_counts(a, k=3), npy=buf.getvalue(),
                           df=pd.DataFrame({"text": [TEXT, text_of(12)], "label": [0, 1]}),
                           tmp=tmp_path_factory.mktemp("counts"))


_FAST = dict(flip_bound=0, seeds=(0,), ks=(0.5,))  # the deletion test's cheapest settings


def _store(d, v):
    return d.tmp / f"store-{abs(hash(repr(v)))}"


# name -> (call(doc, value), the argument's name as the message must give it)
COUNTS = {
    "analyze max_tokens": (lambda d, v: lv.analyze(d.model, TEXT, max_tokens=v), "max_tokens"),
    "predict_probs max_tokens": (lambda d, v: lv.predict_probs(d.model, [TEXT], max_tokens=v), "max_tokens"),
    "pick_document seed": (lambda d, v: lv.pick_document(np.array([[.9, .1], [.2, .8]]), [0, 0], "false positive",
                                                         seed=v), "seed"),
    "pick_document positive": (lambda d, v: lv.pick_document(np.array([[.9, .1], [.2, .8]]), [0, 1],
                                                             "most confident positive", positive=v), "positive"),
    "integrated_gradients target": (lambda d, v: lv.integrated_gradients(d.model, d.a, target=v, n_steps=2,
                                                                         use_cache=False), "target"),
    "integrated_gradients n_steps": (lambda d, v: lv.integrated_gradients(d.model, d.a, n_steps=v, use_cache=False),
                                     "n_steps"),
    "integrated_gradients internal_batch_size": (lambda d, v: lv.integrated_gradients(
        d.model, d.a, n_steps=2, internal_batch_size=v, use_cache=False), "internal_batch_size"),
    "integrated_gradients max_steps": (lambda d, v: lv.integrated_gradients(
        d.model, d.a, n_steps=2, adaptive=True, tolerance=1e-12, max_steps=v, use_cache=False), "max_steps"),
    "estimate_ig_seconds n_tokens": (lambda d, v: lv.estimate_ig_seconds(d.model, v, 2, cache_dir=d.tmp), "n_tokens"),
    "estimate_ig_seconds n_steps": (lambda d, v: lv.estimate_ig_seconds(d.model, 16, v, cache_dir=d.tmp), "n_steps"),
    "explain target": (lambda d, v: lv.explain(d.model, d.a, "grad_x_input", target=v), "target"),
    "explain ig n_steps": (lambda d, v: lv.explain(d.model, d.a, "ig", n_steps=v, use_cache=False), "n_steps"),
    "explain random seed": (lambda d, v: lv.explain(d.model, d.a, "random", seed=v), "seed"),
    "topk_indices k": (lambda d, v: lv.topk_indices(d.a.attention, k=v), "k"),
    "topk_indices workers": (lambda d, v: lv.topk_indices(d.a.attention, k=2, workers=v), "workers"),
    "token_counts k": (lambda d, v: lv.token_counts(d.a, k=v), "k"),
    "token_counts layers": (lambda d, v: lv.token_counts(d.a, k=2, layers=[v]), "layer"),
    "token_counts heads": (lambda d, v: lv.token_counts(d.a, k=2, heads=[v]), "head"),
    "instance_counts k": (lambda d, v: lv.instance_counts(d.a, d.a.encoded.tokens[1], k=v), "k"),
    "count_intersection top_n": (lambda d, v: lv.count_intersection(d.counts, d.counts, top_n=v), "top_n"),
    "pool_attention grid": (lambda d, v: lv.pool_attention(d.a.attention, grid=v), "grid"),
    "pool_dataset total": (lambda d, v: lv.pool_dataset([d.a.attention], grid=4, total=v), "total"),
    "head_weights num_layers": (lambda d, v: lv.head_weights(v, 2), "num_layers"),
    "head_weights layers": (lambda d, v: lv.head_weights(2, 2, layers=[v]), "layer"),
    "AttentionBands.dense layer": (lambda d, v: d.a.attention.dense(v, 0), "layer"),
    "AttentionBands.dense head": (lambda d, v: d.a.attention.dense(0, v), "head"),
    "AttentionBands.layer_bands": (lambda d, v: d.a.attention.layer_bands(v), "layer"),
    "AttentionBands.received layers": (lambda d, v: d.a.attention.received(layers=[v]), "layer"),
    "agreement_table layer_range": (lambda d, v: lv.agreement_table(d.a, d.scores, layer_range=(0, v)),
                                    "layer range"),
    "head_importance max_examples": (lambda d, v: lv.head_importance(d.model, d.df, max_tokens=32, max_examples=v),
                                     "max_examples"),
    "cached_head_importance max_examples": (lambda d, v: lv.cached_head_importance(
        d.model, d.df, max_tokens=32, max_examples=v, cache_dir=d.tmp), "max_examples"),
    "load_head_importance num_layers": (lambda d, v: lv.load_head_importance(d.npy, num_layers=v, num_heads=2,
                                                                             filename="x.npy"), "num_layers"),
    "DeletionSettings flip_bound": (lambda d, v: lv.DeletionSettings(flip_bound=v), "flip_bound"),
    "DeletionSettings batch_size": (lambda d, v: lv.DeletionSettings(batch_size=v), "batch_size"),
    "DeletionSettings seeds": (lambda d, v: lv.DeletionSettings(seeds=(v,)), "seed"),
    "faithfulness flip_bound": (lambda d, v: faithfulness(d.model, d.a, d.scores, seeds=(0,), ks=(0.5,),
                                                          flip_bound=v), "flip_bound"),
    "faithfulness batch_size": (lambda d, v: faithfulness(d.model, d.a, d.scores, batch_size=v, **_FAST),
                                "batch_size"),
    "faithfulness seeds": (lambda d, v: faithfulness(d.model, d.a, d.scores, seeds=(v,), flip_bound=0, ks=(0.5,)),
                           "seed"),
    "faithfulness layers": (lambda d, v: faithfulness(d.model, d.a, d.scores, layers=[v], **_FAST), "layer"),
    "document_leaderboard flip_bound": (lambda d, v: lv.document_leaderboard(
        d.model, d.a, ["grad_x_input"], seeds=(0,), ks=(0.5,), flip_bound=v), "flip_bound"),
    "document_leaderboard batch_size": (lambda d, v: lv.document_leaderboard(
        d.model, d.a, ["grad_x_input"], batch_size=v, **_FAST), "batch_size"),
    "document_leaderboard seeds (random not chosen)": (lambda d, v: lv.document_leaderboard(
        d.model, d.a, ["grad_x_input"], seeds=(v,), flip_bound=0, ks=(0.5,)), "seed"),
    "document_leaderboard target": (lambda d, v: lv.document_leaderboard(d.model, d.a, ["random"], target=v, **_FAST),
                                    "target"),
    "leaderboard max_tokens": (lambda d, v: lv.leaderboard(d.model, [TEXT], ["grad_x_input"], max_tokens=v,
                                                           seeds=(0,), ks=(0.5,), cache_dir=d.tmp), "max_tokens"),
    "leaderboard batch_size": (lambda d, v: lv.leaderboard(d.model, [TEXT], ["grad_x_input"], max_tokens=32,
                                                           batch_size=v, cache_dir=d.tmp), "batch_size"),
    "leaderboard target": (lambda d, v: lv.leaderboard(d.model, [TEXT], ["grad_x_input"], v, max_tokens=32,
                                                       cache_dir=d.tmp), "target"),
    "leaderboard ig n_steps": (lambda d, v: lv.leaderboard(d.model, [TEXT], ["ig"], max_tokens=32,
                                                           options={"ig": {"n_steps": v}}, cache_dir=d.tmp),
                               "n_steps"),
    "dataset_attributions target": (lambda d, v: lv.dataset_attributions(d.model, [TEXT], v, n_steps=2, max_tokens=32,
                                                                          cache_dir=d.tmp), "target"),
    "dataset_attributions n_steps": (lambda d, v: lv.dataset_attributions(d.model, [TEXT], 0, n_steps=v,
                                                                           max_tokens=32, cache_dir=d.tmp), "n_steps"),
    "dataset_attributions min_docs": (lambda d, v: lv.dataset_attributions(
        d.model, [TEXT], 0, n_steps=2, max_tokens=32, min_docs=v, cache_dir=d.tmp), "min_docs"),
    "dataset_agreement ig_steps": (lambda d, v: lv.dataset_agreement(d.model, [TEXT], max_tokens=32, ig_steps=v,
                                                                     cache_dir=d.tmp), "ig_steps"),
    "dataset_agreement max_tokens": (lambda d, v: lv.dataset_agreement(d.model, [TEXT], max_tokens=v, ig_steps=2,
                                                                       cache_dir=d.tmp), "max_tokens"),
    "dataset_faithfulness ig_steps": (lambda d, v: lv.dataset_faithfulness(
        d.model, [TEXT], max_tokens=32, ig_steps=v, seeds=(0,), ks=(0.5,), cache_dir=d.tmp), "ig_steps"),
    "dataset_faithfulness batch_size": (lambda d, v: lv.dataset_faithfulness(
        d.model, [TEXT], max_tokens=32, ig_steps=2, batch_size=v, seeds=(0,), ks=(0.5,), cache_dir=d.tmp),
        "batch_size"),
    "dataset_faithfulness seeds": (lambda d, v: lv.dataset_faithfulness(
        d.model, [TEXT], max_tokens=32, ig_steps=2, seeds=(v,), ks=(0.5,), cache_dir=d.tmp), "seed"),
    "dataset_faithfulness layers": (lambda d, v: lv.dataset_faithfulness(
        d.model, [TEXT], max_tokens=32, ig_steps=2, layers=[v], seeds=(0,), ks=(0.5,), cache_dir=d.tmp), "layers"),
    "PrecomputeSettings max_tokens": (lambda d, v: Settings(max_tokens=v), "max_tokens"),
    "PrecomputeSettings grid": (lambda d, v: Settings(grid=v), "grid"),
    "PrecomputeSettings n_steps": (lambda d, v: Settings(n_steps=v), "n_steps"),
    "PrecomputeSettings importance_docs": (lambda d, v: Settings(importance_docs=v), "importance_docs"),
    "PrecomputeSettings flip_bound": (lambda d, v: Settings(flip_bound=v), "flip_bound"),
    "PrecomputeSettings layer_range": (lambda d, v: Settings(layer_range=(0, v)), "layer_range"),
    "PrecomputeSettings seeds": (lambda d, v: Settings(seeds=(v,)), "seeds"),
    "PrecomputeSettings faithfulness_layers": (lambda d, v: Settings(faithfulness_layers=(v,)), "faithfulness_layers"),
    "precompute limit": (lambda d, v: lv.precompute(d.model, d.df, _store(d, v), "attention", Settings(max_tokens=32),
                                                    limit=v), "limit"),
    "precompute shard i": (lambda d, v: lv.precompute(d.model, d.df, _store(d, v), "attention",
                                                      Settings(max_tokens=32), shard=(v, 2)), "shard"),
    "precompute shard N": (lambda d, v: lv.precompute(d.model, d.df, _store(d, v), "attention",
                                                      Settings(max_tokens=32), shard=(0, v)), "shard"),
    "local_store limit": (lambda d, v: lv.local_store(d.model, d.df, "attention", Settings(max_tokens=32),
                                                      cache_dir=d.tmp, limit=v), "limit"),
    "run_on_ray workers (before a cluster starts)": (lambda d, v: lv.run_on_ray(
        "demo", "demo", _store(d, v), "attention", Settings(max_tokens=32), workers=v), "workers"),
    "run_on_ray limit (before a cluster starts)": (lambda d, v: lv.run_on_ray(
        "demo", "demo", _store(d, v), "attention", Settings(max_tokens=32), limit=v), "limit"),
    "ResultStore limit": (lambda d, v: lv.ResultStore(d.tmp, limit=v), "limit"),
    "BudgetLRU max_bytes": (lambda d, v: lv.BudgetLRU(v), "max_bytes"),
    "BudgetLRU max_entries": (lambda d, v: lv.BudgetLRU(100, max_entries=v), "max_entries"),
    "DocumentAnalysis.explained_name": (lambda d, v: d.a.explained_name(v), "target"),
}

FRACTIONS = {
    "DeletionSettings ks": (lambda d, v: lv.DeletionSettings(ks=(v,)), "ks"),
    "faithfulness ks": (lambda d, v: faithfulness(d.model, d.a, d.scores, ks=(v,), flip_bound=0, seeds=(0,)), "ks"),
    "faithfulness max_removed": (lambda d, v: faithfulness(d.model, d.a, d.scores, max_removed=v, seeds=(0,),
                                                           ks=(0.5,)), "max_removed"),
    "document_leaderboard max_removed": (lambda d, v: lv.document_leaderboard(
        d.model, d.a, ["grad_x_input"], max_removed=v, seeds=(0,), ks=(0.5,)), "max_removed"),
    "dataset_faithfulness max_removed": (lambda d, v: lv.dataset_faithfulness(
        d.model, [TEXT], max_tokens=32, ig_steps=2, max_removed=v, seeds=(0,), ks=(0.5,), cache_dir=d.tmp),
        "max_removed"),
    "dataset_agreement top": (lambda d, v: lv.dataset_agreement(d.model, [TEXT], max_tokens=32, ig_steps=2, top=v,
                                                                cache_dir=d.tmp), "top"),
    "compare p": (lambda d, v: lv.compare(d.a.attention.received(), d.scores, p=v), "p"),
    "compare top": (lambda d, v: lv.compare(d.a.attention.received(), d.scores, top=v), "top"),
    "agreement_table top (not a note on every row)": (lambda d, v: lv.agreement_table(d.a, d.scores, top=v), "top"),
    "top_sets top": (lambda d, v: lv.top_sets(d.a.encoded.tokens, d.a.attention.received(), d.scores, top=v), "top"),
    "PrecomputeSettings rbo_p": (lambda d, v: Settings(rbo_p=v), "rbo_p"),
    "PrecomputeSettings top": (lambda d, v: Settings(top=v), "top"),
    "PrecomputeSettings max_removed": (lambda d, v: Settings(max_removed=v), "max_removed"),
    "PrecomputeSettings ks": (lambda d, v: Settings(ks=(v,)), "ks"),
}

REALS = {
    "DeletionSettings threshold": (lambda d, v: lv.DeletionSettings(threshold=v), "threshold"),
    "integrated_gradients tolerance": (lambda d, v: lv.integrated_gradients(
        d.model, d.a, n_steps=2, adaptive=True, tolerance=v, max_steps=4, use_cache=False), "tolerance"),
}


def _refused(doc, call, name: str, value) -> None:
    with pytest.raises(lv.LongvizError) as info:
        call(doc, value)
    message = str(info.value)
    assert name in message and " must " in message, message  # the argument and what it accepts


@pytest.mark.parametrize("value", NOT_COUNTS)
@pytest.mark.parametrize("case", list(COUNTS))
def test_a_count_that_is_not_a_whole_number_in_range_is_refused_by_name(doc, case, value):
    call, name = COUNTS[case]
    _refused(doc, call, name, value)
    if case.startswith(("precompute", "run_on_ray")):
        assert not _store(doc, value).exists()  # refused before anything is written


@pytest.mark.parametrize("value", NOT_FRACTIONS)
@pytest.mark.parametrize("case", list(FRACTIONS))
def test_a_fraction_that_is_not_a_finite_number_in_range_is_refused_by_name(doc, case, value):
    call, name = FRACTIONS[case]
    _refused(doc, call, name, value)


@pytest.mark.parametrize("value", NOT_REALS)
@pytest.mark.parametrize("case", list(REALS))
def test_a_threshold_or_tolerance_that_is_not_a_finite_number_is_refused_by_name(doc, case, value):
    call, name = REALS[case]
    _refused(doc, call, name, value)


@traceback
@pytest.mark.parametrize("value", [0.5, "0.5", {0.5}], ids=repr)
def test_a_list_setting_given_a_lone_value_is_refused_not_split(value):
    with pytest.raises(lv.LongvizError, match="ks must be a list"):
        lv.DeletionSettings(ks=value)
    with pytest.raises(lv.LongvizError, match="seeds must be a list"):
        Settings(seeds=value)


@traceback
def test_the_dataset_leaderboard_names_a_setting_it_does_not_take(doc):
    with pytest.raises(lv.LongvizError, match=r"no setting\(s\) \['flip_bound'\].*exact"):
        lv.leaderboard(doc.model, [TEXT], ["grad_x_input"], max_tokens=32, flip_bound=3)


# ------------------------------------------------------------------------------ whole floats are the count
@wrong
def test_whole_floats_are_the_counts_they_name():
    s = lv.DeletionSettings(flip_bound=2.0, batch_size=np.float32(4), seeds=(0.0, np.int64(3)), ks=(np.float32(0.5),))
    assert (s.flip_bound, s.batch_size, s.seeds, s.ks) == (2, 4, (0, 3), (0.5,))
    assert all(type(v) is int for v in (s.flip_bound, s.batch_size, *s.seeds))
    p = Settings(max_tokens=64.0, grid=8.0, seeds=(1.0,), layer_range=(0.0, 1.0))
    assert (p.max_tokens, p.grid, p.seeds, p.layer_range) == (64, 8, (1,), (0, 1))
    assert all(type(v) is int for v in (p.max_tokens, p.grid, *p.seeds, *p.layer_range))


@wrong
def test_a_whole_float_flip_bound_scans_as_far_as_that_count(doc):
    as_int = faithfulness(doc.model, doc.a, doc.scores, flip_bound=2, seeds=(0,), ks=(0.5,))
    as_float = faithfulness(doc.model, doc.a, doc.scores, flip_bound=2.0, seeds=(0,), ks=(0.5,))
    assert as_float.flip_limit == as_int.flip_limit == 2
    assert [r.scanned for r in as_float.runs] == [r.scanned for r in as_int.runs]
    np.testing.assert_array_equal(as_float.rows()["aopc"], as_int.rows()["aopc"])
