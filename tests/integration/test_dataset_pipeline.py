"""One dataset pipeline (issue 14 item 1): the demo's first documents through the app's "compute for the dataset"
buttons (AppTest) and through the command line (a subprocess, another store) give the same dataset-wide numbers:
every number the pages show (grid cells, type counts, attribution table, agreement Tables 1-2, per-head grids and
top-set counts, faithfulness summary) equals the command-line store's aggregation. A run stopped half-way and
resumed equals one uninterrupted run; a store made with other settings is not served."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import _disk
from longviz_core.dataset import aggregate, run, stores
from longviz_core.dataset.store import ResultStore
from longviz_core.figures import agreement as afig
from longviz_core.figures import faithfulness as ffig
from longviz_core.views import agreement as ag
from longviz_core.views import counts as tc
from longviz_core.views import pooling
from pages._ui import ig
from pages._ui.keys import K
from support.apps import ROOT, app_test, page
from support.oracles import assert_stores_equal

pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")

DOCS, MAX_TOKENS, STEPS, MAX_REMOVED = 3, 128, 4, 0.1
# what the command line runs; the pages' defaults otherwise (grid 64, every mask kind, p 0.99, seeds 0-4, ...)
CLI = ["--what", "attention,attribution,agreement,faithfulness", "--limit", str(DOCS), "--max-tokens",
       str(MAX_TOKENS), "--n-steps", str(STEPS), "--max-removed", str(MAX_REMOVED)]
# the same per-document numbers summed in the same order, but a document's IG may come from the disk cache, written
# by another process on another thread count: float32 attributions then differ in their last bit or two (a
# mean per occurrence of 0.614 by 1.2e-8 = 0.2 ulp), so a few float32 ulps, relative
RTOL = 1e-6


@pytest.fixture(scope="module")
def cli_store(demo, tmp_path_factory):
    """The command line's store, in a subprocess on as many threads as this process (so IG is bit for bit)."""
    out = tmp_path_factory.mktemp("cli") / "demo-128"
    done = subprocess.run([sys.executable, "-m", "longviz_core", "precompute", "--model", "demo", "--dataset", "demo",
                           *CLI, "--threads", str(torch.get_num_threads()), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return ResultStore(out)


@pytest.fixture()
def private_cache(tmp_path, monkeypatch):
    """The app's local stores and the IG, head-importance and flip-scan caches in a fresh folder (the demo model
    stays in the shared cache), so the buttons compute everything themselves."""
    real = _disk.cache_folder
    monkeypatch.setattr(_disk, "cache_folder",
                        lambda name, cache_dir=None: real(name, cache_dir) if cache_dir else tmp_path / name)
    monkeypatch.setattr(ig, "max_ig_steps", lambda: STEPS)  # the steps presets give way to STEPS
    monkeypatch.delenv("LONGVIZ_STORE_DIR", raising=False)
    return tmp_path


def _record(monkeypatch, owner, name: str, seen: dict):
    """Wrap owner.name so every value it is given (first argument after self) is kept under seen[name]."""
    real = getattr(owner, name)

    def spy(*args, **kwargs):
        seen.setdefault(name, []).append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)


def _compute(at, p: str, docs: int = DOCS, click: bool = True):
    """Pick the first `docs` documents and click the page's compute button (`click`; else the local store of
    another page with the same settings already holds them); the store then holds them."""
    at.slider(key=K.page(p, "docs")).set_value(docs).run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert any(b.key == K.page(p, "run_dataset") for b in at.button) == click
    if click:
        at.button(key=K.page(p, "run_dataset")).click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert any(f"{docs} of the first {docs} documents" in c.value and "local result store" in c.value
               for c in at.caption), [c.value for c in at.caption]


def _frames(at, columns) -> list[pd.DataFrame]:
    return [d.value for d in at.dataframe if list(d.value.columns) == list(columns)]


@pytest.mark.slow  # the store's and the pages' exact first-flip scans of two documents: a minute on one thread
def test_app_buttons_and_command_line_give_the_same_numbers(cli_store, private_cache, monkeypatch):
    seen: dict = {}
    _record(monkeypatch, pooling, "normalised_maps", seen)  # the grid the heatmap page draws
    _record(monkeypatch, ag, "mean_std_table", seen)  # Tables 1-2 as the similarity page formats them
    _record(monkeypatch, afig, "head_agreement_heatmap", seen)  # the per-head grid it draws
    _record(monkeypatch, ffig, "faithfulness_summary", seen)  # the faithfulness summary it formats
    at = app_test()
    at.run()
    at.number_input(key=K.MAX_TOKENS).set_value(MAX_TOKENS).run()

    # heatmap grid: the mean of the documents' relative-position maps
    at.switch_page(page("heatmap_grid")).run()
    at.radio(key="heatmap.scope").set_value("dataset").run()
    _compute(at, "heatmap")
    pooled = seen["normalised_maps"][-1][0]
    assert pooled.n_documents == DOCS
    np.testing.assert_allclose(pooled.cells, cli_store.pooled_attention().cells, rtol=RTOL, atol=0)

    # token counts: per type (and per word) the sum over documents, and the documents counting it (both
    # directions, masked too), all from the heatmap's store
    at.switch_page(page("token_counts")).run()
    at.radio(key="counts.over").set_value("dataset").run()
    _compute(at, "counts", click=False)  # the heatmap's store: the same attention settings
    for group, column, stored in (("type", "token", cli_store.type_counts), ("word", "word", cli_store.word_counts)):
        at.radio(key="counts.group").set_value(group).run()
        for masked in (False, True):
            at.toggle(key="counts.mask").set_value(masked).run()
            shown = _frames(at, [column, "count", "documents"])
            assert len(shown) == len(tc.DIRECTIONS)
            for table, direction in zip(shown, tc.DIRECTIONS):
                pd.testing.assert_frame_equal(table.reset_index(drop=True), stored(direction, masked))
    at.radio(key="counts.group").set_value("type").run()

    # attribution by token type, for the class the page explains, with and without the mask
    at.switch_page(page("attribution")).run()
    at.button(key="attribution.run").click().run()  # the document's own IG first
    at.selectbox(key="attribution.ds_steps").set_value("custom").run()
    at.number_input(key="attribution.ds_steps_n").set_value(STEPS).run()
    _compute(at, "attribution")
    target = at.selectbox(key="attribution.target").value
    columns = aggregate.TOKEN_TABLE_COLUMNS
    for masked in (False, True):
        at.toggle(key="attribution.mask").set_value(masked).run()
        want = cli_store.dataset_attributions(target, masked=masked).table
        positive, negative = _frames(at, columns)
        pd.testing.assert_frame_equal(positive.reset_index(drop=True), want[want["mean_attribution"] > 0].head(10)
                                      .reset_index(drop=True), rtol=RTOL)
        pd.testing.assert_frame_equal(negative.reset_index(drop=True), want[want["mean_attribution"] < 0]
                                      .iloc[::-1].head(10).reset_index(drop=True), rtol=RTOL)

    # agreement: Tables 1-2, every document's rows, the per-head grids and the top-set counts
    at.switch_page(page("agreement")).run()
    at.radio(key="similarity.scope").set_value("dataset").run()
    _compute(at, "similarity")
    want = cli_store.dataset_agreement()
    for summary in seen["mean_std_table"][-2:]:  # Table 1 and Table 2
        pd.testing.assert_frame_equal(summary[0], want.table, rtol=RTOL)
    pd.testing.assert_frame_equal(_frames(at, want.per_document.columns)[0], want.per_document, rtol=RTOL)
    assert len(want.head_grids) > 1 and len(want.set_counts) > 1
    grids, configs = sorted(want.head_grids), sorted(want.set_counts)
    for i, key in enumerate(grids):
        at.selectbox(key="similarity.ds_grid").set_value(i).run()
        np.testing.assert_allclose(seen["head_agreement_heatmap"][-1][0], want.head_grids[key], rtol=RTOL)
    for i, key in enumerate(configs):
        at.selectbox(key="similarity.ds_config").set_value(i).run()
        counts = want.set_counts[key]
        pd.testing.assert_frame_equal(_frames(at, counts.columns)[-1].reset_index(drop=True), counts,
                                      check_dtype=False)

    # faithfulness: per ranking mean and sd over documents, flips over the documents that flipped
    at.switch_page(page("faithfulness")).run()
    at.radio(key="faithfulness.scope").set_value("dataset").run()
    at.selectbox(key="faithfulness.max_removed").set_value("10 %").run()
    _compute(at, "faithfulness")
    want = cli_store.dataset_faithfulness().summary
    pd.testing.assert_frame_equal(seen["faithfulness_summary"][-1][0], want, rtol=RTOL)
    pd.testing.assert_frame_equal(at.dataframe[0].value, ffig.faithfulness_summary(want))

    # a store made with other settings is not served: the command line's store serves the same settings only
    monkeypatch.setenv("LONGVIZ_STORE_DIR", str(cli_store.root.parent))
    fresh = app_test()
    fresh.run()
    fresh.number_input(key=K.MAX_TOKENS).set_value(MAX_TOKENS).run()
    fresh.switch_page(page("faithfulness")).run()
    fresh.radio(key="faithfulness.scope").set_value("dataset").run()
    fresh.selectbox(key="faithfulness.max_removed").set_value("10 %").run()
    read = f"{DOCS} of 60 documents, read from the result store {cli_store.root}"
    assert any(read in c.value for c in fresh.caption), [c.value for c in fresh.caption]
    fresh.selectbox(key="faithfulness.max_removed").set_value("20 %").run()
    assert not any("read from the result store" in c.value for c in fresh.caption)
    assert any(b.label.startswith("Compute the dataset-wide summary") for b in fresh.button)


def test_a_stopped_run_resumes_to_the_uninterrupted_store(demo_model, demo_dataset, private_cache):
    """Stopping (an exception from the progress callback, as the app's Stop button or a rerun raises) after the
    second document, then computing again, gives the store of one uninterrupted run: every unit, index table and
    aggregate; nothing is computed twice."""
    settings = run.Settings(max_tokens=MAX_TOKENS, n_steps=STEPS)

    class Stop(Exception):
        pass

    def stop_after_two(fraction, message):
        if message.startswith("document 2/"):
            raise Stop

    with pytest.raises(Stop):
        stores.local_store(demo_model, demo_dataset, "attribution", settings, progress=stop_after_two, limit=DOCS)
    half = ResultStore(stores.local_store_dir(demo_model, demo_dataset, settings), limit=DOCS)
    assert half.count("attribution") == 2 and not half.complete("attribution")
    done = stores.local_store(demo_model, demo_dataset, "attribution", settings, limit=DOCS)
    assert done.root == half.root and done.complete("attribution")
    logs = run.read_logs(done.root)
    assert sorted(logs["kind"]) == ["attention"] * DOCS + ["attribution"] * DOCS  # each unit computed once
    whole = private_cache / "whole"
    run.precompute(demo_model, demo_dataset, whole, "attribution", settings, limit=DOCS)
    assert_stores_equal(done.root, whole, rtol=1e-6, atol=1e-7)  # IG from its disk cache or afresh: float32


def test_two_sessions_asking_for_one_store_at_once_share_one_computation(tiny_longformer, tmp_path):
    """Two of the app's in-process runs of the same store at once (two users of a lab's server, or a user's two
    tabs: the head-importance scaling of one dataset): the second waits for the first, then finds every unit
    done; both return the same store. The command line still refuses (tests/unit/test_store.py)."""
    import threading

    from longviz_core.dataset.kinds import Settings
    from tiny import text_of

    df = pd.DataFrame({"text": [text_of(40), text_of(25), text_of(33)], "label": [0, 1, 0]})
    settings = Settings(max_tokens=32)
    got, errors, told = {}, [], []
    holding, waiting = threading.Event(), threading.Event()

    def first_progress(_f, _msg):  # inside the run, the writer's lock held: hold it until the second waits
        holding.set()
        assert waiting.wait(60)

    def second_progress(_f, msg):
        told.append(msg)
        if msg.startswith("Waiting"):
            waiting.set()

    def session(name, progress):
        try:
            got[name] = stores.local_run(tiny_longformer, df, "attention", settings, progress, tmp_path)
        except Exception as exc:  # noqa: BLE001 - asserted empty below
            errors.append(exc)

    first = threading.Thread(target=session, args=("first", first_progress))
    first.start()
    assert holding.wait(120)
    second = threading.Thread(target=session, args=("second", second_progress))
    second.start()
    for t in (first, second):
        t.join(300)
    assert not errors, errors
    assert got["first"][1].computed["attention"] == 3 and got["first"][1].skipped["attention"] == 0
    assert got["second"][1].computed["attention"] == 0 and got["second"][1].skipped["attention"] == 3
    assert told[0] == "Waiting for another session or process that is computing the same results"
    assert got["first"][0].root == got["second"][0].root
    assert got["first"][0].doc_ids("attention") == got["second"][0].doc_ids("attention") == [
        "0000000", "0000001", "0000002"]
