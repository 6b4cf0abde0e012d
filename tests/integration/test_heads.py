"""Every head type (longviz_core.model.heads) on tiny random checkpoints: regression (num_labels = 1) and
multi-label (problem_type "multi_label_classification", 3 labels), BERT, ModernBERT and Longformer. Oracles: the
checkpoint run by transformers alone (its raw logit, torch.sigmoid of its logits), IG's completeness against
those independent forwards, and the deletion test against a brute-force loop scoring one copy at a time."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

import longviz_core as lv
from longviz_core.attribution import integrated_gradients
from longviz_core.evaluation import faithfulness as fa
from longviz_core.evaluation.deletion import LODDS_UNDEFINED, NO_THRESHOLD, DeletionError
from longviz_core.model.heads import MULTI_LABEL, REGRESSION, SINGLE_LABEL, Head, HeadError
from tiny import as_multi_label, make_tiny_bert, make_tiny_longformer, make_tiny_modernbert, text_of

pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")
EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    return {
        "bert-regression": make_tiny_bert(root / "br", labels=1, initializer_range=0.3),
        "bert-multi": as_multi_label(make_tiny_bert(root / "bm", labels=3, initializer_range=0.3)),
        "modernbert-regression": make_tiny_modernbert(root / "mr", labels=1, initializer_range=0.3),
        "modernbert-multi": as_multi_label(make_tiny_modernbert(root / "mm", labels=3, initializer_range=0.3)),
        "longformer-regression": make_tiny_longformer(root / "lr", labels=1, window=[16, 8],
                                                      initializer_range=0.5, seed=3),
        "longformer-multi": as_multi_label(make_tiny_longformer(root / "lm", labels=3, window=[16, 8],
                                                                initializer_range=0.5, seed=3)),
    }


@pytest.fixture(scope="module")
def models(dirs):
    return {name: lv.load_model(str(path), device="cpu") for name, path in dirs.items()}


def _logits(path_or_net, enc, ids) -> torch.Tensor:
    """Oracle: the checkpoint's own forward of `ids` (eager attention, the document's positions and masks)."""
    net = path_or_net
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long)[None]  # noqa: E731
    kwargs = dict(input_ids=t(ids), attention_mask=t(np.ones(len(ids))))
    if net.config.model_type == "longformer":
        kwargs.update(global_attention_mask=t(enc.global_mask), position_ids=t(enc.position_ids))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return net(**kwargs).logits[0].double()


def _plain(path):
    return AutoModelForSequenceClassification.from_pretrained(str(path), attn_implementation="eager").eval()


def test_the_head_follows_transformers_rules():
    class Config:
        def __init__(self, num_labels, problem_type=None):
            self.num_labels, self.problem_type = num_labels, problem_type

    assert Head.of_config(Config(1)).kind == REGRESSION
    assert Head.of_config(Config(1, "multi_label_classification")).kind == REGRESSION  # num_labels 1 wins
    assert Head.of_config(Config(3, "multi_label_classification")).kind == MULTI_LABEL
    assert Head.of_config(Config(3, "single_label_classification")).kind == SINGLE_LABEL
    assert Head.of_config(Config(2)).kind == SINGLE_LABEL
    with pytest.raises(HeadError):
        Head("softmax")
    with pytest.raises(HeadError, match="regression"):
        Head(SINGLE_LABEL).check_threshold(0.5)
    with pytest.raises(HeadError, match="finite"):
        Head(REGRESSION).check_threshold(math.nan)


@pytest.mark.parametrize("name", ["bert-regression", "bert-multi", "modernbert-regression", "modernbert-multi",
                                  "longformer-regression", "longformer-multi"])
def test_analyze_gives_the_heads_own_outputs(models, dirs, name):
    """A regression's output is its raw logit (no softmax's 1.000); a multi-label head's are torch.sigmoid of
    the logits, each label on its own (they need not sum to 1); predict_probs agrees."""
    m = models[name]
    a = lv.analyze(m, text_of(30), 60)
    logits = _logits(_plain(dirs[name]), a.encoded, a.input_ids)
    if name.endswith("regression"):
        assert m.head.kind == REGRESSION and a.probs.shape == (1,)
        np.testing.assert_allclose(a.probs, logits.numpy(), rtol=1e-5, atol=1e-5)
        assert a.predicted == 0 and a.predicted_set == (0,) and a.explained_name() == "the score"
    else:
        want = torch.sigmoid(logits).numpy()
        assert m.head.kind == MULTI_LABEL and a.probs.shape == (3,)
        np.testing.assert_allclose(a.probs, want, rtol=1e-5, atol=1e-6)
        assert abs(a.probs.sum() - 1) > 1e-3  # independent sigmoids, not a softmax
        assert a.predicted == int(np.argmax(want))
        assert a.predicted_set == tuple(int(i) for i in np.flatnonzero(want >= 0.5))
        assert a.explained_name(2) == f"label {a.label_name(2)}'s probability"
    np.testing.assert_allclose(lv.predict_probs(m, [text_of(30)], 60)[0], a.probs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, target", [("bert-regression", 0), ("modernbert-regression", 0),
                                          ("bert-multi", 2), ("longformer-multi", 1)])
def test_ig_completeness_for_the_score_and_for_one_sigmoid(models, dirs, name, target, tmp_path):
    """sum(raw) = F(x) - F(x') with F the raw score (regression: in score units) or sigmoid_target (multi-label),
    F(x) and F(x') from plain transformers forwards of the input and the <s> <pad>... </s> baseline."""
    m = models[name]
    enc = lv.encode(m.tokenizer, text_of(20), 60, model_max=m.max_tokens, position_offset=m.position_offset)
    attr = integrated_gradients(m, enc, target=target, n_steps=64, cache_dir=tmp_path)
    net = _plain(dirs[name])
    f = (lambda z: float(z[target])) if name.endswith("regression") else (lambda z: float(torch.sigmoid(z)[target]))
    f_x, f_b = f(_logits(net, enc, enc.input_ids)), f(_logits(net, enc, enc.baseline_ids))
    d = net.config.hidden_size
    scale = max(abs(f_x), abs(f_b), 1.0)
    assert abs(attr.prob_input - f_x) <= d * EPS32 * scale and abs(attr.prob_baseline - f_b) <= d * EPS32 * scale
    assert abs(f_x - f_b) > 0.01, "the test model is too flat for completeness to mean anything"
    rounding = d * EPS32 * (np.abs(attr.raw).sum() + abs(f_x) + abs(f_b))
    assert abs(attr.raw.sum() - (f_x - f_b)) <= abs(attr.delta) + rounding
    assert abs(attr.delta) <= 1e-2 * abs(f_x - f_b)
    assert attr.head == m.head.kind
    assert (attr.weak_explanation is None) if name.endswith("regression") else True


# ------------------------------------------------------------------------------------------ the deletion test
def _brute_scores(net, enc, order, mask_id, read):
    """read(logits) of the intact input and of every count c = 1 .. m of `order` removed, one copy at a time."""
    intact = read(_logits(net, enc, enc.input_ids))
    values = []
    for c in range(1, len(order) + 1):
        ids = enc.input_ids.copy()
        ids[order[:c]] = mask_id
        values.append(read(_logits(net, enc, ids)))
    return intact, np.asarray(values)


def _first(crossed: np.ndarray):
    hits = np.flatnonzero(crossed)
    return int(hits[0]) + 1 if hits.size else None


def test_deletion_on_a_regression_head(models, dirs):
    """AOPC in score units equals a brute-force loop; LOdds is undefined (None, NaN in rows, a typed error when
    asked for); no threshold: no flips, none scanned; with a threshold: the first crossing of the brute-force scan."""
    m = models["longformer-regression"]
    a = lv.analyze(m, text_of(25), 128)
    attribution = np.random.default_rng(0).normal(size=a.n)
    net = _plain(dirs["longformer-regression"])
    plain = fa.faithfulness(m, a, attribution, seeds=(0,), batch_size=1)
    mm = a.n - 2
    assert not plain.lodds_defined and not plain.flips_defined and plain.head == REGRESSION
    rows = plain.rows()
    assert rows.filter(like="lodds").isna().all().all() and rows["first_flip"].isna().all()
    assert rows["settled"].all() and plain.exact
    counts = np.asarray([fa.removed_count(k, mm) for k in plain.ks])
    runs = [*plain.curves.values(), *plain.random.runs]
    brute = {}
    for run in runs:
        s0, scores = _brute_scores(net, a.encoded, run.order, m.tokenizer.mask_token_id, lambda z: float(z[0]))
        brute[run.name, run.seed] = (s0, scores)
        assert plain.p_original == pytest.approx(s0, abs=1e-9)
        np.testing.assert_allclose(run.probs, scores[counts - 1], atol=1e-9)
        np.testing.assert_allclose(run.aopc_k, s0 - scores[counts - 1], atol=1e-9)
        assert run.lodds_k is None and run.flip_removed is None and run.scanned == 0
        assert run.flip_text(mm) == NO_THRESHOLD
        with pytest.raises(DeletionError, match="undefined"):
            run.lodds
    assert LODDS_UNDEFINED.startswith("LOdds is undefined")
    # a threshold between the intact score and the scores along the rankings: some run crosses it
    s0, scores = brute["ig", None]
    threshold = (s0 + np.median(scores)) / 2
    judged = fa.faithfulness(m, a, attribution, seeds=(0,), batch_size=1, threshold=threshold)
    assert judged.flips_defined and judged.threshold == threshold
    flipped = 0
    for run in [*judged.curves.values(), *judged.random.runs]:
        s0, scores = brute[run.name, run.seed]
        want = _first((scores >= threshold) != (s0 >= threshold))
        assert run.flip_removed == want, (run.name, run.seed)
        assert run.scanned == (mm if want is None else want)
        flipped += want is not None
    assert flipped >= 1


def test_deletion_on_a_multi_label_head_flips_when_the_label_crosses_one_half(models, dirs):
    """The label explained is the most probable; AOPC and LOdds in its sigmoid; a flip is sigmoid_y crossing 0.5;
    a threshold is refused (typed) for a label head."""
    m = models["longformer-multi"]
    a = lv.analyze(m, text_of(25), 128)
    attribution = np.random.default_rng(1).normal(size=a.n)
    net = _plain(dirs["longformer-multi"])
    res = fa.faithfulness(m, a, attribution, rankings=("ig", "attention"), batch_size=1)
    y = res.predicted
    assert y == a.predicted and res.lodds_defined and res.flips_defined
    counts = np.asarray([fa.removed_count(k, a.n - 2) for k in res.ks])
    for run in res.curves.values():
        s0, sig = _brute_scores(net, a.encoded, run.order, m.tokenizer.mask_token_id,
                                lambda z: float(torch.sigmoid(z)[y]))
        assert res.p_original == pytest.approx(s0, abs=1e-9)
        np.testing.assert_allclose(run.aopc_k, s0 - sig[counts - 1], atol=1e-9)
        np.testing.assert_allclose(run.lodds_k, np.log(sig[counts - 1]) - math.log(s0), atol=1e-7)
        assert run.flip_removed == _first((sig >= 0.5) != (s0 >= 0.5))
    with pytest.raises(HeadError, match="regression"):
        fa.faithfulness(m, a, attribution, rankings=("ig",), threshold=0.5)


# ------------------------------------------------------------------------------------------ the pages
@pytest.mark.parametrize("name", ["bert-regression", "bert-multi"])
def test_the_pages_say_what_they_explain(dirs, name, tmp_path):
    """Streamlit AppTest: the Document page shows a regression's score (no 'p =') or every label's probability
    with the predicted set; the Faithfulness and Explainers pages name the explained quantity, and for a
    regression offer the threshold and say that without one there are no decision flips."""
    import pandas as pd
    from streamlit.testing.v1 import AppTest

    from pages._ui.keys import K
    from support.apps import APP

    csv = tmp_path / "data.csv"
    # class-number labels: load_dataset reads labels as class numbers, a regression's too
    pd.DataFrame({"text": [text_of(20), text_of(12)], "label": [0, 0]}).to_csv(csv, index=False)
    at = AppTest.from_file(str(APP), default_timeout=300)
    for key, value in {K.MODEL: str(dirs[name]), K.DATASET_KIND: "file path", K.DATASET_PATH: str(csv),
                       K.DOC_MODE: "by index", K.MAX_TOKENS: 60}.items():
        at.session_state[key] = value
    at.switch_page("pages/document.py").run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    metrics = {m.label: m for m in at.metric}
    model = lv.load_model(str(dirs[name]), device="cpu")
    a = lv.analyze(model, text_of(20), 60)
    if name.endswith("regression"):
        assert "Score" in metrics and "Predicted" not in metrics and not at.dataframe
        assert metrics["Score"].value == f"{a.probs[0]:.4f}" and "p =" not in (metrics["Score"].delta or "")
    else:
        assert "Predicted labels" in metrics
        assert metrics["Predicted labels"].value.replace("\u200b", "") == (
            ", ".join(a.label_name(i) for i in a.predicted_set) or "none")
        shown = at.dataframe[0].value
        np.testing.assert_allclose(shown["probability"].to_numpy(), a.probs, rtol=1e-6)
        assert list(shown["predicted"]) == [i in a.predicted_set for i in range(3)]
    for page in ("faithfulness", "explainers"):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in (*at.exception, *at.error)])
        captions = " ".join(c.value for c in at.caption)
        assert f"Explained: {a.explained_name()}" in captions, page
        thresholds = [n for n in at.number_input if n.label.startswith("Score threshold")]
        if name.endswith("regression"):
            assert "the score" in captions and len(thresholds) == 1 and thresholds[0].value is None
            assert "no decision flips without a threshold" in captions
        else:
            assert f"label {a.label_name(a.predicted)}'s probability" in captions and not thresholds
