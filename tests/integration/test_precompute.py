"""The precompute on a tiny Longformer: a run killed (SIGKILL) at the worst moments and resumed equals an
uninterrupted run; two shards merge into the single-shard store; the store's dataset-wide numbers equal
brute-force loops of the single-document views over the documents; manifests refuse to mix settings."""
from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import (
    ManifestMismatchError,
    analyze,
    load_dataset,
    load_model,
)
from longviz_core.cli import main
from longviz_core.dataset.kinds import Settings, resolve_kinds
from longviz_core.dataset.run import parse_shard, precompute, read_logs, shard_rows
from longviz_core.dataset.store import ResultStore
from support.oracles import assert_stores_equal
from tiny import WORDS, make_tiny_longformer

ROOT = Path(__file__).resolve().parents[2]
WHAT = "attention,attribution,head-importance,agreement,faithfulness"
MAX_TOKENS, STEPS = 64, 4
SETTINGS = Settings(max_tokens=MAX_TOKENS, n_steps=STEPS)
DOC_KINDS = ("attention", "attribution", "agreement", "faithfulness")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two torch threads on a busy 2-core machine are many times slower than one; subprocesses get --threads 1."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("precompute")
    model_dir = make_tiny_longformer(base / "model", initializer_range=0.5)  # non-trivial predictions and IG
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(12, 90)))) for _ in range(6)]
    csv = base / "data.csv"
    pd.DataFrame({"text": texts, "label": [0, 1, 1, 0, 1, 0]}).to_csv(csv, index=False)
    model = load_model(str(model_dir))
    df = load_dataset(str(csv), id2label=model.id2label)
    return model_dir, csv, model, df


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory):
    """An uninterrupted single-shard run of every kind."""
    _, _, model, df = setup
    out = tmp_path_factory.mktemp("reference") / "store"
    summary = precompute(model, df, out, WHAT, SETTINGS)
    assert summary.computed == {"attention": 6, "attribution": 6, "head-importance": 1, "agreement": 6,
                                "faithfulness": 6}
    return out


# ----------------------------------------------------------------------------------------- kill and resume
# The command line with a fault point: StoreWriter.publish (the rename that makes a staged unit exist) is wrapped
# so that its nth call stops there, "staged" just before the rename (the unit's files written and fsync'ed) or
# "renamed" just after it (in place, not yet indexed), writes "<point> <doc_id> <kind>" to the flag file and
# sleeps until the test SIGKILLs the process.
_FAULT_RUN = """
import sys, time
from pathlib import Path
from longviz_core.cli import main
from longviz_core.dataset.store import StoreWriter

point, nth, flag = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
publish, seen = StoreWriter.publish, [0]

def reach(final):
    seen[0] += 1
    if seen[0] == nth:
        doc_id = "None" if final.parent.name == "dataset" else final.parent.name
        flag.write_text(f"{point} {doc_id} {final.name}")
        time.sleep(3600)

def publish_with_fault(self, stage, final):
    if point == "staged":
        reach(final)
    done = publish(self, stage, final)
    if point == "renamed" and done:
        reach(final)
    return done

StoreWriter.publish = publish_with_fault
sys.exit(main(sys.argv[4:]))
"""


def _cli(model_dir, csv, out, fault=None, flag=None):
    """The precompute command in a subprocess; fault = "<point>:<n>" stops it at the nth passage (see _FAULT_RUN)."""
    run = ([sys.executable, "-c", _FAULT_RUN, *fault.split(":"), str(flag)] if fault
           else [sys.executable, "-m", "longviz_core"])
    return subprocess.Popen([*run, *_args(model_dir, csv, out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _args(model_dir, csv, out) -> list[str]:
    return ["precompute", "--model", str(model_dir), "--dataset", str(csv), "--what", WHAT, "--n-steps", str(STEPS),
            "--max-tokens", str(MAX_TOKENS), "--out", str(out), "--threads", "1"]


def _kill_at(proc, flag: Path, timeout=300) -> str:
    """Wait until the process reports reaching its fault point, then SIGKILL it."""
    deadline = time.monotonic() + timeout
    while not flag.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before its fault point: {proc.communicate()[1][-2000:]}")
        assert time.monotonic() < deadline, "fault point not reached"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    text = flag.read_text()
    flag.unlink()
    return text


@pytest.mark.slow
def test_killed_runs_resume_to_the_uninterrupted_result(setup, reference, tmp_path, capsys):
    model_dir, csv, _, _ = setup
    out, flag = tmp_path / "store", tmp_path / "reached"

    # 1: killed with a unit's files written but not yet renamed into place: it must not exist
    point, doc_id, kind = _kill_at(_cli(model_dir, csv, out, "staged:6", flag), flag).split()
    assert point == "staged"
    assert not (out / "docs" / doc_id / kind).exists()
    assert list((out / "tmp" / "shard-0-of-1").iterdir())  # the half-staged unit, left in the staging area
    assert doc_id not in ResultStore(out).doc_ids(kind)

    # 2: killed after a rename, before the unit was indexed: the reader sees it from the files
    point, renamed_doc, renamed_kind = _kill_at(_cli(model_dir, csv, out, "renamed:3", flag), flag).split()
    assert point == "renamed"
    with sqlite3.connect(out / "index" / "shard-0-of-1.sqlite") as conn:
        assert not conn.execute("SELECT 1 FROM entries WHERE doc_id=? AND kind=?", (renamed_doc, renamed_kind)).fetchall()
    assert renamed_doc in ResultStore(out).doc_ids(renamed_kind)

    # 3: runs to the end (in this process: the same command, without another start-up)
    assert main(_args(model_dir, csv, out)) == 0
    assert "already done" in capsys.readouterr().err  # the summary line

    assert_stores_equal(out, reference)
    logs = read_logs(out)
    computed = list(zip(logs["doc_id"], logs["kind"]))
    assert len(computed) == len(set(computed)), "a unit was computed twice"
    everything = {(d, k) for d in ResultStore(reference).doc_ids("attention") for k in DOC_KINDS}
    # every unit was computed exactly once, except the one renamed just before the kill: found, never redone
    assert set(computed) == everything - {(renamed_doc, renamed_kind)}
    assert logs["pid"].nunique() == 3
    with sqlite3.connect(out / "index" / "shard-0-of-1.sqlite") as conn:  # run 3 indexed the orphan
        assert conn.execute("SELECT 1 FROM entries WHERE doc_id=? AND kind=?", (renamed_doc, renamed_kind)).fetchall()
    assert not (out / "tmp" / "shard-0-of-1").exists()


# ----------------------------------------------------------------------------------------- shards
def test_two_shards_merge_into_the_single_shard_store(setup, reference, tmp_path):
    _, _, model, df = setup
    out = tmp_path / "sharded"
    first = precompute(model, df, out, WHAT, SETTINGS, shard=(1, 2))
    second = precompute(model, df, out, WHAT, SETTINGS, shard=(0, 2))
    assert first.computed["attention"] == 3 and second.computed["attention"] == 3
    assert first.computed["head-importance"] + second.computed["head-importance"] == 1  # dataset level: once
    assert sorted(p.name for p in (out / "index").glob("*.sqlite")) == ["shard-0-of-2.sqlite", "shard-1-of-2.sqlite"]
    assert_stores_equal(out, reference)
    again = precompute(model, df, out, WHAT, SETTINGS, shard=(0, 2))  # resumable: nothing left to do
    assert sum(again.computed.values()) == 0 and again.skipped["faithfulness"] == 3


def test_shard_split_is_deterministic_and_complete():
    assert shard_rows(10, (0, 3)) == [0, 3, 6, 9] and shard_rows(10, (2, 3), limit=6) == [2, 5]
    assert sorted(r for i in range(4) for r in shard_rows(11, (i, 4))) == list(range(11))
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "1", "a/b", "-1/2"):
        with pytest.raises(ValueError):
            parse_shard(bad)
    with pytest.raises(ValueError):
        shard_rows(10, (2, 2))


# ----------------------------------------------------------------------------------------- one code path
def _nan_mean_std(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return (float(v.mean()), float(v.std())) if v.size else (np.nan, np.nan)


def test_store_numbers_equal_loops_over_the_documents(setup, reference):
    """Oracles: the single-document views, run on every document in a plain loop (IG recomputed as the kind
    computes it: one thread, no cache, so bit for bit the stored scores), then numpy means, population sds, sums
    and Counters over the documents; against the store's aggregation methods."""
    from collections import Counter

    from longviz_core.attribution import ConvergenceWarning, integrated_gradients
    from longviz_core.views import agreement as ag
    from longviz_core.evaluation import faithfulness as fa
    from longviz_core.evaluation.importance import head_importance
    from longviz_core.views.pooling import pool_dataset

    _, _, model, df = setup
    store = ResultStore(reference)
    texts = list(df["text"])
    analyses = [analyze(model, t, MAX_TOKENS) for t in texts]
    np.testing.assert_array_equal(store.pooled_attention().cells, pool_dataset(a.attention for a in analyses).cells)
    importance = head_importance(model, df, MAX_TOKENS)
    np.testing.assert_allclose(store.head_importance(), importance, rtol=1e-12)
    assert store.settings("head-importance") == {"examples": 32, "importance_method": "t3vis", "normalise": "minmax"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        scores = [integrated_gradients(model, a, None, STEPS, use_cache=False).scores for a in analyses]
    masks = [ag.mask_for(a.tokens, ag.MASK_KINDS) for a in analyses]

    # agreement: Tables 1-2 (mean and population sd per configuration), per-head grids, top-set counts
    tables = [ag.agreement_table(a, s, importance=importance, mask=m) for a, s, m in zip(analyses, scores, masks)]
    ours = store.dataset_agreement()
    assert ours.n_documents == len(texts) and len(ours.table) == len(tables[0])
    for i, row in ours.table.iterrows():
        config = tuple(tables[0].loc[i, ["source", "scaled", "masked"]])
        assert (row["source"], row["scaled"], row["masked"]) == config
        for metric in ("cosine", "kendall_tau", "rbo", "jaccard_top", "cosine_rank"):
            mean, std = _nan_mean_std([t.loc[i, metric] for t in tables])
            np.testing.assert_allclose([row[f"{metric} mean"], row[f"{metric} std"]], [mean, std], rtol=1e-9,
                                       atol=1e-12)
    assert set(ours.head_grids) == {(m, mode) for m in ag.HEAD_METRICS for mode in ag.MASK_MODES}
    for metric, mode in ours.head_grids:
        grids = np.array([ag.head_agreement(a, s, metric, m, mode) for a, s, m in zip(analyses, scores, masks)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a head dead in every document stays NaN
            np.testing.assert_allclose(ours.head_grids[metric, mode], np.nanmean(grids, axis=0), rtol=1e-9)
    for (label, scaled, mode), counts in ours.set_counts.items():
        source = next(s for s in ag.attention_sources(model.num_layers) if s.label == label)
        total = Counter()
        for a, s, m in zip(analyses, scores, masks):
            attention = a.attention.received(layers=source.layers, scale=importance if scaled else None)
            total.update(ag.top_sets(a.tokens, attention, s, m, mode).both["token"])
        assert dict(zip(counts["token"], counts["both"])) == {**{t: 0 for t in counts["token"]}, **total}

    # faithfulness: per ranking the mean and population sd over documents; flips over those that flipped
    rows = [fa.faithfulness(model, a, s).table().set_index("ranking") for a, s in zip(analyses, scores)]
    summary = store.dataset_faithfulness().summary.set_index("ranking")
    for ranking in rows[0].index:
        for col in ("aopc", "lodds", "aopc@10%", "flip_rate"):
            want = np.array([r.loc[ranking, col] for r in rows])
            np.testing.assert_allclose(summary.loc[ranking, [f"{col} mean", f"{col} std"]].to_numpy(float),
                                       [want.mean(), want.std()], rtol=1e-9, atol=1e-15)
        flips = np.array([r.loc[ranking, "first_flip"] for r in rows], dtype=float)
        assert summary.loc[ranking, "flipped"] == np.isfinite(flips).sum()
        np.testing.assert_allclose(summary.loc[ranking, "first_flip mean"], _nan_mean_std(flips)[0], rtol=1e-12)


def test_dataset_counts_by_type_and_word_sum_the_documents(setup, tmp_path):
    """The attention kind's counts, made by two shards: per token type and per word, the sum over the documents
    of token_counts at the stored settings (k = 10, paper rule, all heads; the page's mask or none), in plain
    Counters; ties in the order of first appearance over the documents. A store of the earlier format (made before
    the counts by word) is refused, saying that it needs a new store."""
    from collections import Counter

    from longviz_core.dataset.stores import serves_view
    from longviz_core.views.counts import DIRECTIONS, token_counts
    from longviz_core.views.masking import build_mask

    _, _, model, df = setup
    out = tmp_path / "store"
    for shard in ((0, 2), (1, 2)):
        precompute(model, df, out, "attention", SETTINGS, shard=shard)
    store = ResultStore(out)
    assert store.settings("attention")["counts"]["groups"] == ["type", "word"]
    analyses = [analyze(model, t, MAX_TOKENS) for t in df["text"]]
    for by, column, read in (("type", "token", store.type_counts), ("word", "word", store.word_counts)):
        for direction in DIRECTIONS:
            for masked in (False, True):
                counts, documents, first = Counter(), Counter(), {}
                for a in analyses:
                    mask = build_mask(a.tokens) if masked else None
                    table = token_counts(a, 10, direction, by, mask=mask, rule="paper")
                    for name, count in zip(table[column], table["count"]):
                        counts[name] += int(count)
                        documents[name] += 1
                        first.setdefault(name, len(first))
                got = read(direction, masked)
                assert list(got.columns) == [column, "count", "documents"], (by, direction, masked)
                assert dict(zip(got[column], got["count"])) == dict(counts), (by, direction, masked)
                assert dict(zip(got[column], got["documents"])) == dict(documents), (by, direction, masked)
                assert got[column].tolist() == sorted(counts, key=lambda n: (-counts[n], first[n]))
                assert max(documents.values()) > 1  # sums over documents, not one document's counts
    assert serves_view(store, "attention", SETTINGS, only=("counts",))
    # a store of the earlier format (counts by type only) is refused with the fix, never read with tables missing
    old = _earlier_format(out, tmp_path / "old", lambda kinds: kinds["attention"]["counts"].pop("groups"))
    with pytest.raises(ManifestMismatchError, match="format 1.*new --out directory"):
        ResultStore(old).word_counts()


def _earlier_format(src, dst, change_kinds):
    """A copy of the store `src` whose manifest (sealed anew) is of format 1, its kinds' settings changed as the
    earlier format held them."""
    import json

    from longviz_core._disk import bytes_digest

    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    del manifest["checksum"]
    manifest["format"] = 1
    change_kinds(manifest["kinds"])
    manifest["checksum"] = bytes_digest(json.dumps(manifest, sort_keys=True).encode())
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_the_api_dataset_functions_read_a_store(setup, reference, tmp_path):
    """longviz_core.dataset_agreement / dataset_faithfulness / dataset_attributions run the same precompute into a
    local store and return its aggregation: equal to the reference store made by precompute; a second call
    computes nothing."""
    import longviz_core as lv

    _, _, model, df = setup
    store = ResultStore(reference)
    texts = list(df["text"])
    app = lv.dataset_agreement(model, texts, max_tokens=MAX_TOKENS, ig_steps=STEPS,
                               importance=store.head_importance(), cache_dir=tmp_path)
    ours = store.dataset_agreement()
    assert app.from_cache == 0
    pd.testing.assert_frame_equal(ours.table, app.table, rtol=1e-9)
    pd.testing.assert_frame_equal(ours.per_document, app.per_document, rtol=1e-9)
    assert ours.head_grids.keys() == app.head_grids.keys() and ours.set_counts.keys() == app.set_counts.keys()
    for key, grid in app.head_grids.items():
        np.testing.assert_allclose(ours.head_grids[key], grid, rtol=1e-9)
    for key, counts in app.set_counts.items():
        pd.testing.assert_frame_equal(ours.set_counts[key], counts, check_dtype=False)
    again = lv.dataset_agreement(model, texts, max_tokens=MAX_TOKENS, ig_steps=STEPS,
                                 importance=store.head_importance(), cache_dir=tmp_path)
    assert again.from_cache == len(texts)

    app_f = lv.dataset_faithfulness(model, texts, df["label"], max_tokens=MAX_TOKENS, ig_steps=STEPS,
                                    cache_dir=tmp_path)
    ours_f = store.dataset_faithfulness()
    pd.testing.assert_frame_equal(ours_f.summary, app_f.summary, rtol=1e-9)
    pd.testing.assert_frame_equal(ours_f.per_document, app_f.per_document, rtol=1e-9, check_dtype=False)
    pd.testing.assert_frame_equal(ours_f.long_curves(), app_f.long_curves(), rtol=1e-9)

    # IG of the other class of a binary model is the negation: a store of predicted-class IG serves class 1
    want = lv.dataset_attributions(model, texts, 1, STEPS, max_tokens=MAX_TOKENS, cache_dir=tmp_path).table
    got = store.dataset_attributions(1).table
    pd.testing.assert_frame_equal(got.sort_values("token").reset_index(drop=True),
                                  want.sort_values("token").reset_index(drop=True), rtol=1e-5, atol=1e-7)


def test_faithfulness_settings_and_an_earlier_store(reference, tmp_path):
    """The manifest records the exact flip scan and the random seeds; a store made by the earlier one-seed grid
    search is refused with a clear message instead of being summarised with missing columns."""

    from longviz_core.evaluation.faithfulness import DEFAULT_SEEDS

    settings = ResultStore(reference).settings("faithfulness")
    assert settings["flip"] == "exact scan" and settings["max_removed"] == 1.0
    assert settings["seeds"] == list(DEFAULT_SEEDS)
    rows = ResultStore(reference).table("faithfulness", "rows")
    assert (rows[rows["ranking"] == "Random"]["runs"] == len(DEFAULT_SEEDS)).all()

    def one_seed_grid_search(kinds):
        for key in ("flip", "max_removed", "seeds"):
            del kinds["faithfulness"][key]
        kinds["faithfulness"].update(flip_step=0.05, refine=True, seed=0)

    old = _earlier_format(reference, tmp_path / "old", one_seed_grid_search)
    with pytest.raises(ManifestMismatchError, match="format 1.*new --out directory"):
        ResultStore(old).dataset_faithfulness()


def test_attribution_by_token_type_keeps_scores_and_raw_sums(setup, tmp_path):
    """The dataset-wide table of a store made for class 1 equals the Python API's (its own local store) for every
    mask and min_docs choice; the store keeps the normalised scores and the raw sums of each document."""
    import longviz_core as lv
    from longviz_core.attribution import (
        ConvergenceWarning,
        integrated_gradients,
        normalise_scores,
    )

    _, _, model, df = setup
    precompute(model, df, tmp_path / "s", "attribution", Settings(max_tokens=MAX_TOKENS, n_steps=STEPS, target="1"))
    store = ResultStore(tmp_path / "s")
    assert store.serves("attribution", n_steps=STEPS, scores="l2")
    for masked, min_docs in ((False, 1), (True, 1), (False, 3), (True, 2)):
        got = store.dataset_attributions(1, masked=masked, min_docs=min_docs)
        want = lv.dataset_attributions(model, df["text"], 1, STEPS, max_tokens=MAX_TOKENS, cache_dir=tmp_path / "c",
                                       masked=masked, min_docs=min_docs)
        assert (got.n_docs, got.masked, got.min_docs) == (want.n_docs, want.masked, want.min_docs) == (
            len(df), masked, min_docs)
        # the same IG (one thread, bit for bit), summed in SQL in index order: 2 * 6 eps * sum|terms|, and every
        # normalised score is at most 1 in magnitude, so sum|terms| <= occurrences
        pd.testing.assert_frame_equal(got.table.sort_values("token").reset_index(drop=True),
                                      want.table.sort_values("token").reset_index(drop=True), rtol=0,
                                      atol=12 * np.finfo(float).eps * float(want.table["occurrences"].max()))
    masked = store.attribution_by_token_type(masked=True)
    assert set(masked["token"]) < set(store.attribution_by_token_type()["token"]) and "the" not in set(masked["token"])
    analysis = analyze(model, df["text"].iloc[2], MAX_TOKENS)
    unit = store.load(store.doc_ids("attribution")[2], "attribution")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # 4 steps: the store records it in its summary
        attr = integrated_gradients(model, analysis, 1, STEPS, use_cache=False)
    # the same computation bit for bit: one thread, and batches of one step (n_steps / 10 rounded up) in both
    np.testing.assert_array_equal(unit.arrays["raw"], attr.raw)
    np.testing.assert_array_equal(unit.arrays["scores"], normalise_scores(attr.raw))
    assert unit.tables["summary"]["total"].iloc[0] == attr.total


def test_local_store_is_the_in_app_path(setup, reference, tmp_path):
    from longviz_core.dataset.stores import local_store, local_store_dir

    _, _, model, df = setup
    calls = []
    store = local_store(model, df, "attention", SETTINGS, progress=lambda f, m: calls.append((f, m)),
                        cache_dir=tmp_path, limit=4)
    assert store.root.parent == tmp_path / "stores" and store.count("attention") == 4 and store.complete("attention")
    # documents done / total after each, with the time left from the documents measured so far
    assert [f for f, _ in calls] == [0.25, 0.5, 0.75, 1.0] and calls[0][1].startswith("document 1/4, about")
    assert calls[-1][1] == "document 4/4"
    np.testing.assert_array_equal(store.pooled_attention().cells,
                                  ResultStore(reference, limit=4).pooled_attention().cells)
    again = local_store(model, df, "attention", SETTINGS, cache_dir=tmp_path)  # all 6: the first 4 are reused
    assert again.root == store.root and len(read_logs(store.root)) == len(df)
    np.testing.assert_array_equal(again.pooled_attention().cells, ResultStore(reference).pooled_attention().cells)
    # settings written differently but giving the same numbers share a store; others get their own
    assert local_store_dir(model, df, replace(SETTINGS, seeds=(0, 1, 2, 3, 4)), tmp_path) == store.root
    assert local_store_dir(model, df, replace(SETTINGS, seeds=(0, 1)), tmp_path) != store.root


# ----------------------------------------------------------------------------------------- refusals
def test_refuses_to_mix_settings_and_names_unknown_kinds(setup, reference, tmp_path, capsys):
    model_dir, csv, model, df = setup
    copy = tmp_path / "copy"
    shutil.copytree(reference, copy)
    with pytest.raises(ManifestMismatchError, match="n_steps: 4 vs 8"):
        precompute(model, df, copy, "attribution", Settings(max_tokens=MAX_TOKENS, n_steps=8))
    with pytest.raises(ManifestMismatchError, match="importance_method: 't3vis' vs 'michel'"):
        precompute(model, df, copy, "head-importance", replace(SETTINGS, importance_method="michel"))
    with pytest.raises(ValueError, match="importance_method must be"):
        Settings(importance_method="taylor")
    rc = main(["precompute", "--model", str(model_dir), "--dataset", str(csv), "--what", "attention",
               "--max-tokens", "32", "--out", str(copy)])
    err = capsys.readouterr().err
    assert rc == 2 and "Refusing to mix" in err and "max_tokens differs" in err
    assert resolve_kinds("agreement") == ("attention", "attribution", "head-importance", "agreement")
    with pytest.raises(ValueError, match="unknown kind"):
        resolve_kinds("attention,colour")


# ----------------------------------------------------------------------------------------- the app
def test_app_shows_the_dataset_grid_from_a_store_made_by_the_command(demo, tmp_path, monkeypatch):
    """The heatmap grid's dataset scope reads a store found through LONGVIZ_STORE_DIR instead of computing."""
    from streamlit.testing.v1 import AppTest

    from longviz_core.views import pooling

    stores = tmp_path / "stores"
    assert main(["precompute", "--model", "demo", "--dataset", "demo", "--what", "attention", "--limit", "3",
                 "--max-tokens", "512", "--out", str(stores / "demo-attention")]) == 0
    monkeypatch.setenv("LONGVIZ_STORE_DIR", str(stores))

    def no_computing(*args, **kwargs):
        raise AssertionError("the page computed the dataset grid instead of reading the store")

    monkeypatch.setattr(pooling, "pool_dataset", no_computing)
    from pages._ui.keys import K

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state[K.MAX_TOKENS] = 512  # the store's length: a store made for another length is not served
    at.run()
    at.switch_page("pages/heatmap_grid.py").run()
    at.radio(key="heatmap.scope").set_value("dataset").run()
    assert not at.exception and not at.error
    assert any("3 of 60 documents, read from the result store" in c.value for c in at.caption)
    assert at.image  # the grid was drawn


@pytest.mark.slow
def test_dataset_pages_read_a_store_made_by_the_command(demo, demo_dataset, tmp_path, monkeypatch):
    """The agreement, faithfulness and attribution pages' dataset-wide views come from a store found through
    LONGVIZ_STORE_DIR when it was made with the page's settings (here the defaults, at 256 tokens); nothing is
    computed. A setting the store was not made with asks to compute into the app's local store instead. One
    document: the store's exact first-flip scans cost minutes a document on one thread, and reading, not the
    summary's arithmetic (tests/integration/test_dataset_pipeline.py), is what is checked here."""
    from longviz_core.dataset import aggregate, run
    from pages._ui.keys import K
    from support.apps import app_test, page

    stores = tmp_path / "stores"
    assert main(["precompute", "--model", "demo", "--dataset", "demo", "--what", "agreement,faithfulness",
                 "--limit", "1", "--max-tokens", "256", "--out", str(stores / "demo-256")]) == 0
    store = ResultStore(stores / "demo-256")
    read = f"1 of {len(demo_dataset)} documents, read from the result store"
    monkeypatch.setenv("LONGVIZ_STORE_DIR", str(stores))

    def no_computing(*args, **kwargs):
        raise AssertionError("the page computed a dataset-wide view instead of reading the store")

    monkeypatch.setattr(run, "precompute", no_computing)

    at = app_test()
    at.run()
    at.number_input(key=K.MAX_TOKENS).set_value(256).run()

    def captions():
        return " ".join(c.value for c in at.caption)

    at.switch_page(page("agreement")).run()
    at.radio(key="similarity.scope").set_value("dataset").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert read in captions(), captions()[-600:]
    expected = aggregate.summarise_agreement(store.table("agreement", "rows"))
    shown = at.dataframe[0].value  # Table 1 (dataset), as fig.table1 formats it
    assert len(shown) == len(expected)  # every configuration, scaled rows included (scaling is on)
    at.checkbox(key="similarity.scale").set_value(False).run()
    assert len(at.dataframe[0].value) == int((~expected["scaled"].astype(bool)).sum())

    at.switch_page(page("faithfulness")).run()
    at.radio(key="faithfulness.scope").set_value("dataset").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert read in captions(), captions()[-600:]
    summary = store.dataset_faithfulness().summary
    assert list(at.dataframe[0].value["ranking"]) == list(summary["ranking"])
    at.number_input(key="faithfulness.seeds").set_value(3).run()  # the store holds the default 5 seeds only
    assert "read from the result store" not in captions()
    assert any(b.label.startswith("Compute the dataset-wide summary") for b in at.button)

    at.switch_page(page("attribution")).run()
    if any(b.label == "Compute attributions" for b in at.button):  # the document's own IG first
        next(b for b in at.button if b.label == "Compute attributions").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert read in captions(), captions()[-600:]
    assert not any(b.label.startswith("Compute the dataset-wide table") for b in at.button)
