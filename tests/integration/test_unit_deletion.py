"""Deletion by units (DeletionSettings.unit) against a brute-force loop that removes the first c units of each
order one copy at a time, for every count: the units ranked by their summed scores, AOPC(k) at round(k·m_u)
units, the first flip counted in units; the unit in the settings' keys, the flip scans' keys and the store's
manifest; occlusion by sentence scored by sentences in the leaderboard."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import longviz_core as lv
from longviz_core.dataset import leaderboard as lb
from longviz_core.dataset import run
from longviz_core.dataset.kinds import KINDS
from longviz_core.evaluation import faithfulness as fa
from longviz_core.evaluation.deletion import DeletionError, DeletionSettings, removal_order
from tiny import make_tiny_longformer

SENTENCES = ["the model learns attention over long documents.", "the compiler checks types!",
             "a neural network trains on data.", "programs, semantics; learning agents search.",
             "2019 results show that the model learns.", "the compiler checks types and the agents search?",
             "a neural network trains.", "results show that programs learn."]
TEXT = " ".join(SENTENCES[:4]) + "\n\n" + " ".join(SENTENCES[4:])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """Large random weights (init 0.5): confident predictions that flip as sentences go."""
    path = make_tiny_longformer(tmp_path_factory.mktemp("unit-deletion"), layers=2, window=[16, 8],
                                initializer_range=0.5, seed=3)
    return lv.load_model(str(path))


def _log_probs(model, enc, ids) -> np.ndarray:
    """Oracle: one unbatched forward with the document's own position ids, attention and global masks."""
    inputs = enc.torch_inputs(model.device)
    inputs["input_ids"] = torch.as_tensor(ids, dtype=torch.long)[None]
    with torch.no_grad():
        return torch.log_softmax(model.model(**inputs).logits[0].double(), -1).numpy()


def _brute_force(model, analysis, spans, unit_order):
    """(log p(y|x), log p(y | x without the first c units) for c = 1 .. m_u, first flip in units or None)."""
    enc = analysis.encoded
    intact = _log_probs(model, enc, enc.input_ids)
    y = int(np.argmax(intact))
    logp, flip = [], None
    for c in range(1, len(unit_order) + 1):
        ids = enc.input_ids.copy()
        for u in unit_order[:c]:
            ids[spans[u][0] : spans[u][1]] = model.tokenizer.mask_token_id
        lp = _log_probs(model, enc, ids)
        logp.append(lp[y])
        if flip is None and int(np.argmax(lp)) != y:
            flip = c
    return intact[y], np.asarray(logp), flip


def test_deletion_by_sentences_equals_brute_force(model):
    a = lv.analyze(model, TEXT, 128)
    seg = lv.segment(a, "sentence")
    m_u = len(seg)
    assert m_u == len(SENTENCES) and [t.strip() for t in seg.texts] == SENTENCES
    scores = np.random.default_rng(2).normal(size=a.n)
    res = fa.faithfulness(model, a, scores, rankings=("ig", "attention", "random"), seeds=(0, 1), unit="sentence",
                          batch_size=8)
    assert res.unit == "sentence" and res.n_removable == m_u and res.flip_limit == m_u
    # the |IG| ranking: sentences by the sum of their tokens' |scores|, highest first (a loop over the spans)
    sums = [np.abs(scores[a0:b0]).sum() for a0, b0 in seg.spans]
    assert res.curves["ig"].order.tolist() == sorted(range(m_u), key=lambda u: (-sums[u], u))
    flipped = 0
    for curve in [*res.curves.values(), *res.random.runs]:
        assert sorted(curve.order.tolist()) == list(range(m_u))
        base, logp, flip = _brute_force(model, a, seg.spans, curve.order)
        counts = [fa.removed_count(k, m_u) for k in res.ks]
        assert curve.removed.tolist() == counts
        np.testing.assert_allclose(curve.lodds_k, logp[np.asarray(counts) - 1] - base, atol=5e-5)
        np.testing.assert_allclose(curve.aopc_k, math.exp(base) - np.exp(logp[np.asarray(counts) - 1]), atol=5e-5)
        assert curve.flip_removed == flip, (curve.name, curve.seed)
        assert curve.flip_fraction == (None if flip is None else flip / m_u)
        flipped += flip is not None
    assert flipped >= 1  # a first flip is exercised, not only "no flip"
    # the random baseline permutes the units with the token test's generator
    assert res.random.runs[0].order.tolist() == np.random.default_rng(0).permutation(m_u).tolist()


def test_settings_and_store_keys_name_the_unit(model, tmp_path):
    assert "unit" not in DeletionSettings().key()  # deletion by tokens keeps the keys stores were made with
    assert DeletionSettings(unit="sentence").key()["unit"] == "sentence"
    with pytest.raises(DeletionError, match="unit must be one of"):
        DeletionSettings(unit="chapter")
    token = run.leaderboard_settings(["random"])
    sentence = run.leaderboard_settings(["random"], unit="sentence")
    kind = KINDS["leaderboard"]
    assert "unit" not in kind.settings(token) and kind.settings(sentence)["unit"] == "sentence"
    faith = KINDS["faithfulness"]
    assert faith.settings(lv.PrecomputeSettings(unit="paragraph"))["unit"] == "paragraph"
    with pytest.raises(lv.SettingsError, match="unit"):
        lv.PrecomputeSettings(unit="chapter")
    # a flip scan by sentences resumes from the disk: the second call scores its curves only
    a = lv.analyze(model, TEXT, 128)
    seg = lv.segment(a, "sentence")
    order = removal_order(seg.per_token(np.arange(len(seg), dtype=float)), segments=seg)
    assert order.tolist() == list(range(len(seg)))[::-1]
    settings = DeletionSettings(unit="sentence", seeds=(), batch_size=4)
    res = lv.deletion_test(model, a, {"last first": order}, settings, resume=True, cache_dir=tmp_path)
    again = lv.deletion_test(model, a, {"last first": order}, settings, resume=True, cache_dir=tmp_path)
    first = res.curves["last first"]
    assert again.curves["last first"].flip_removed == first.flip_removed and first.scanned >= 2
    assert again.forward_passes == 1 + len(set(first.removed.tolist())) < res.forward_passes
    with pytest.raises(DeletionError, match="permutation of the 8 sentence units"):
        lv.deletion_test(model, a, {"tokens": a.encoded.text_positions}, DeletionSettings(unit="sentence"))


def test_leaderboard_deletes_occlusions_sentences_in_its_order(model):
    """Occlusion by sentence, deleted by sentences: its ranking is its own unit scores' order, and its AOPC the
    brute force's along that order."""
    a = lv.analyze(model, TEXT, 128)
    seg = lv.segment(a, "sentence")
    runs = lb.document_leaderboard(model, a, ["occlusion", "random"], unit="sentence", seeds=(0,))
    occ = lv.explain(model, a, "occlusion", unit="sentence")
    phi = lv.aggregate(occ.scores, seg)
    order = np.argsort(-phi, kind="stable")
    base, logp, flip = _brute_force(model, a, seg.spans, order)
    counts = np.asarray([fa.removed_count(k, len(seg)) for k in fa.KS])
    row = runs[runs["method"] == "occlusion"].iloc[0]
    want = math.exp(base) - np.exp(logp[counts - 1])
    assert row["aopc"] == pytest.approx(want.mean(), abs=5e-5)
    assert (math.isnan(row["first_flip"]) and flip is None) or row["first_flip"] == pytest.approx(flip / len(seg))
    # at 1 % one sentence goes, the one occlusion scores highest: AOPC@1 % is its occlusion score
    assert counts[0] == 1 and row["aopc@1%"] == pytest.approx(phi[order[0]], abs=5e-5)
