"""The deletion test scanned to 100 % against a brute-force loop that scores every count one copy at a time:
tiny Longformers with windows [16, 8] (a global <s>, odd lengths) and the demo at a short length."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import longviz_core as lv
from longviz_core.evaluation import faithfulness as fa
from longviz_core.evaluation.deletion import DeletionSettings, row_columns
from longviz_core.evaluation.deletion_engine import deletion_test
from tiny import make_tiny_longformer, text_of


def _log_probs(model, enc, ids) -> np.ndarray:
    """Oracle: one unbatched forward of `ids` with the document's own position ids, attention and global masks."""
    inputs = enc.torch_inputs(model.device)
    inputs["input_ids"] = torch.as_tensor(ids, dtype=torch.long, device=model.device)[None]
    with torch.no_grad():
        logits = model.model(**inputs).logits[0].double()
    return torch.log_softmax(logits, -1).cpu().numpy()


def _brute_force(model, analysis, order, mask_id):
    """(log p(y | x), log p(y | x with order[:c] removed) for c = 1 .. m, first flip or None), y the intact
    input's argmax: every count scored alone."""
    enc = analysis.encoded
    intact = _log_probs(model, enc, enc.input_ids)
    y = int(np.argmax(intact))
    logp, flip = [], None
    for c in range(1, len(order) + 1):
        ids = enc.input_ids.copy()
        ids[order[:c]] = mask_id
        lp = _log_probs(model, enc, ids)
        logp.append(lp[y])
        if flip is None and int(np.argmax(lp)) != y:
            flip = c
    return intact[y], np.asarray(logp), flip


@pytest.fixture(scope="module")
def windows_16_8(tmp_path_factory):
    """Windows 16 and 8 per layer, large random weights: confident predictions that flip along the rankings."""
    path = make_tiny_longformer(tmp_path_factory.mktemp("w16-8"), layers=2, window=[16, 8], initializer_range=0.5,
                                seed=3)
    return lv.load_model(str(path))


def _check_against_brute_force(model, analysis, attribution, batch_size, tol):
    """Flips equal; curves to `tol`: 1e-9 one copy per forward (the oracle's own computation), else fp32's
    batch-to-batch rounding of the logits (~1e-6 relative, a few units of logits here)."""
    assert analysis.encoded.global_mask[0] == 1 and analysis.encoded.global_mask[1:].sum() == 0
    mask_id = model.tokenizer.mask_token_id
    res = fa.faithfulness(model, analysis, attribution, seeds=(0, 1), batch_size=batch_size)
    m = analysis.n - 2
    assert res.flip_limit == m
    flipped = 0
    for run in [*res.curves.values(), *res.random.runs]:
        base, logp, flip = _brute_force(model, analysis, run.order, mask_id)
        assert res.p_original == pytest.approx(math.exp(base), abs=tol)
        assert run.flip_removed == flip, (run.name, run.seed)
        assert run.scanned == (m if flip is None else flip)
        counts = [fa.removed_count(k, m) for k in res.ks]
        want_lodds = logp[np.asarray(counts) - 1] - base  # (K,)
        want_aopc = math.exp(base) - np.exp(logp[np.asarray(counts) - 1])
        np.testing.assert_allclose(run.lodds_k, want_lodds, atol=tol)
        np.testing.assert_allclose(run.aopc_k, want_aopc, atol=tol)
        assert run.aopc == pytest.approx(want_aopc.mean(), abs=tol)
        assert run.lodds == pytest.approx(want_lodds.mean(), abs=tol)
        flipped += flip is not None
    return flipped


@pytest.mark.parametrize("n_words,batch_size,tol", [(21, 1, 1e-9), (34, 8, 5e-5)])
def test_exact_scan_equals_brute_force_on_windows_16_8(windows_16_8, n_words, batch_size, tol):
    analysis = lv.analyze(windows_16_8, text_of(n_words), 128)
    assert analysis.n % 2 == 1 or n_words == 34  # an odd length among the cases
    attribution = np.random.default_rng(n_words).normal(size=analysis.n)
    flipped = _check_against_brute_force(windows_16_8, analysis, attribution, batch_size, tol)
    assert flipped >= 1  # the case exercises a first flip, not only "no flip"


def test_exact_scan_equals_brute_force_on_the_demo(demo_model, demo_dataset):
    analysis = lv.analyze(demo_model, demo_dataset["text"].iloc[0], 41)
    assert analysis.n == 41
    attribution = np.random.default_rng(0).normal(size=analysis.n)
    _check_against_brute_force(demo_model, analysis, attribution, 8, 5e-5)


def test_stages_curves_then_flips_within_the_bound_then_exact(windows_16_8, tmp_path):
    """The page's stages on one engine: the curves alone (no flip claimed), the flips within a bound (what the
    exact scan finds up to it, "no flip within the first N tokens" past it), then the scan resumed to the end; an
    identical order costs no copy of its own."""
    analysis = lv.analyze(windows_16_8, text_of(30), 128)
    m = analysis.n - 2
    orders = fa.ranking_orders(analysis, np.random.default_rng(1).normal(size=analysis.n))
    orders["ig again"] = orders["ig"].copy()
    settings = DeletionSettings(seeds=(0, 1), flip_bound=0, batch_size=8)
    run = lambda s: deletion_test(windows_16_8, analysis, orders, s, resume=True, cache_dir=tmp_path)  # noqa: E731
    curves = run(settings)
    assert curves.forward_passes <= 1 + (len(orders) - 1 + 2) * len(settings.ks) < curves.copies_needed
    assert all(r.scanned == 0 and r.flip_removed is None for r in curves.runs) and not curves.exact
    bounded = run(replace(settings, flip_bound=5))
    exact = run(replace(settings, flip_bound=None))
    assert exact.exact and not exact.stopped and list(exact.rows().columns) == row_columns(settings.ks)
    assert exact.forward_passes < exact.copies_needed - 5 * len(exact.runs)  # resumed past the bound
    for b, e, c in zip(bounded.runs, exact.runs, curves.runs):
        np.testing.assert_allclose(b.lodds_k, e.lodds_k, atol=5e-5)
        np.testing.assert_allclose(c.aopc_k, e.aopc_k, atol=5e-5)
        if e.flip_removed is not None and e.flip_removed <= 5:
            assert b.flip_removed == e.flip_removed
        else:
            assert b.flip_removed is None and b.scanned == 5
            assert b.flip_text(m) == "no flip within the first 5 tokens" and not b.flip_text(m) == "no flip"
    ig, again = exact.curves["ig"], exact.curves["ig again"]
    assert again.flip_removed == ig.flip_removed and again.copies == 0 and ig.copies > 0
    base, _, flip = _brute_force(windows_16_8, analysis, orders["ig"], windows_16_8.tokenizer.mask_token_id)
    assert ig.flip_removed == flip
