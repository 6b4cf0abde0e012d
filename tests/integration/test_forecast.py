"""What long work costs before it starts (attribution.cost.forward_flops / estimate_forward / estimate_basis,
attribution.budget.analysis_notice, evaluation.forecast). Oracles: the matrix products torch counts in a real
forward, ModernBERT-base's published dimensions worked out by hand, timings that a stand-in for time_passes makes
proportional to the arithmetic (so every scaled figure has one right value), and the copies a real deletion run
reports."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import longviz_core as lv
from longviz_core.attribution import budget, cost
from longviz_core.evaluation import faithfulness as fa
from longviz_core.evaluation import forecast
from longviz_core.evaluation.deletion import DeletionError
from longviz_core.progress import format_seconds
from tiny import make_tiny_bert, make_tiny_modernbert, text_of


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("forecast")
    return {"bert": lv.load_model(str(make_tiny_bert(root / "bert", layers=2, heads=2, hidden=32))),
            "modernbert": lv.load_model(str(make_tiny_modernbert(root / "mb")))}


def fwd(model, n):
    """A forward's seconds as the scaling has it: 1 s at 512 tokens, the rest in weighted FLOPs."""
    w = cost._FORWARD_ATTENTION
    return cost.forward_flops(model, n, w) / cost.forward_flops(model, 512, w)


def step(model, n):
    """A third of a forward+backward's seconds: 1 s at 512 tokens."""
    w = cost._STEP_ATTENTION
    return cost.forward_flops(model, n, w) / cost.forward_flops(model, 512, w)


@pytest.fixture
def timed(models, tmp_path, monkeypatch):
    """time_passes replaced: a forward takes fwd(n) seconds, a forward+backward 3 step(n) (see below); the lengths
    timed are listed. Timings go to a fresh cache."""
    monkeypatch.setenv("LONGVIZ_CACHE_DIR", str(tmp_path))
    lengths = []

    def fake(model, enc, precision, target=0):
        lengths.append(enc.n)
        return cost.Passes(fwd(model, enc.n), 3 * step(model, enc.n), fwd(model, enc.n), 3 * step(model, enc.n))

    monkeypatch.setattr(cost, "time_passes", fake)
    return lengths


def test_forward_flops_are_the_matrix_products_of_a_real_forward(models):
    """Tiny BERT (eager, every layer full): torch's FlopCounterMode counts each matmul of a forward. The formula
    charges every row two FLOPs per linear weight; the pooler (d x d) and classifier (d x 2) read one row only."""
    from torch.utils.flop_counter import FlopCounterMode

    m = models["bert"]
    for words in (12, 60):
        enc = m.encode(text_of(words), m.max_tokens)
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            m.model(**m.family.inputs(enc, m.device))
        d, n = 32, enc.n
        head_rows = 2 * (n - 1) * (d * d + d * 2)  # the pooler's and classifier's rows the model never computes
        assert cost.forward_flops(m, n) - head_rows == counter.get_total_flops()


def test_forward_flops_at_modernbert_base_dimensions():
    """22 layers (8 full, 14 sliding of radius 64), hidden 768, GLU 1,152, built on the meta device."""
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    from longviz_core.model.families import SlidingFamily

    config = ModernBertConfig(vocab_size=50368, hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                              intermediate_size=1152, local_attention=128, global_attn_every_n_layers=3,
                              max_position_embeddings=8192, num_labels=2)
    with torch.device("meta"):
        net = ModernBertForSequenceClassification(config)
    model = SimpleNamespace(model=net, family=SlidingFamily(net.config))
    # per layer Wqkv 768 x 2304, Wo 768 x 768, Wi 768 x 2304 (GLU: two halves), Wo 1152 x 768; head 768 x 768, 768 x 2
    weights = 22 * (768 * 2304 + 768 * 768 + 768 * 2304 + 1152 * 768) + 768 * 768 + 768 * 2
    assert weights == 110_888_448
    n = 8192
    attention = 4 * n * 768 * (8 * n + 14 * 129)  # Q K^T and P V: a full layer's n keys, a sliding one's 129
    assert cost.forward_flops(model, n) == 2 * n * weights + attention
    assert cost.forward_flops(model, n) == pytest.approx(3.51e12, rel=1e-3)
    assert cost.forward_flops(model, n) / cost.forward_flops(model, 512) == pytest.approx(28.6, abs=0.05)


def test_a_long_bucket_is_scaled_from_a_short_one_not_timed(models, timed):
    m = models["modernbert"]
    f = lambda n: fwd(m, n)  # noqa: E731
    timing = lambda n: fwd(m, n) + 3 * step(m, n)  # noqa: E731  a forward and a forward+backward
    # timing 1,024 tokens fits the budget; 8,192 tokens does not
    assert timing(1024) <= cost._TIMING_BUDGET_S < timing(8192)
    # the attention's weights make the forward+backward grow faster than the forward
    assert step(m, 8192) / step(m, 512) > f(8192) / f(512) > cost.forward_flops(m, 8192) / cost.forward_flops(m, 512)

    long = cost.estimate_forward(m, 8192)
    assert timed == [512]  # only the shortest bucket ran
    assert long == cost.Estimate(pytest.approx(f(8192)), 8192, 512, True)
    assert long.basis == ("one forward timed at 512 tokens on this machine, scaled to 8,192 tokens by the model's "
                          "arithmetic")
    short = cost.estimate_forward(m, 1000)  # its bucket's timing fits the budget: timed itself
    assert timed == [512, 1024]
    assert short == cost.Estimate(pytest.approx(f(1024) * 1000 / 1024), 1000, 1024, False)
    assert short.basis == "one forward timed at 1,024 tokens on this machine"
    # the nearest shorter timing is the one scaled; IG's estimate rests on it too, and nothing more runs
    assert cost.estimate_forward(m, 8192).timed_at == 1024
    assert cost.estimate_ig_seconds(m, 8192, 4) == pytest.approx(4 * 3 * step(m, 8192) + 2 * f(8192))
    assert cost.estimate_basis(m, 8192) == ("one forward and one forward+backward timed at 1,024 tokens on this "
                                            "machine, scaled to 8,192 tokens by the model's arithmetic")
    assert timed == [512, 1024]


def test_a_run_alone_gives_no_forward_and_its_batch_speeds_stay(models, timed):
    m = models["modernbert"]
    # what record_timing writes when a run comes first: the step, no forward, the run's batch size's speed
    cost._write_timing(m, 512, "fp32", {"forward": 0.0, "step": 5.0, "batches": {"2": 1.5}}, None)
    assert cost.estimate_ig_seconds(m, 512, 2) == pytest.approx(2 * 5.0)  # IG reads the run's step
    assert timed == []
    assert cost.estimate_forward(m, 512) == cost.Estimate(pytest.approx(1.0), 512, 512, False)
    assert timed == [512]
    assert cost._read_timing(m, 512, "fp32", None) == {"forward": 1.0, "step": 3.0, "batches": {"2": 1.5}}


def test_the_analysis_notice(models, timed, monkeypatch):
    m = models["modernbert"]
    assert budget.analysis_notice(m, 8192) is None  # a tiny model's analysis: seconds, nothing timed to say so
    assert timed == []
    monkeypatch.setattr(budget, "QUICK_FLOPS", 0.0)  # as if it were a large model
    seconds = budget.ANALYSIS_FORWARDS * fwd(m, 8192)
    assert seconds > budget.NOTICE_S
    assert budget.analysis_notice(m, 8192) == (
        f"Analysing 8,192 tokens with this model takes about {format_seconds(seconds)} on this machine (cpu): the "
        "analysis and this page's views cost about 2.2 forwards, estimated from one forward timed at 512 tokens on "
        "this machine, scaled to 8,192 tokens by the model's arithmetic.")
    assert budget.analysis_notice(m, 600) is None  # 1.5 forwards of a few seconds: no notice
    assert budget.fitting_max_tokens(m, 15.0) == lv.DEFAULT_MAX_TOKENS  # decided without timing 8,192 tokens
    assert 8192 not in timed


def test_deletion_copies_count_what_a_run_scores(models):
    m = models["modernbert"]
    a = lv.analyze(m, text_of(120), 256)
    scores = torch.linspace(0, 1, a.n).numpy()
    res = fa.faithfulness(m, a, scores, flip_bound=0)  # three rankings and five random seeds: curves only
    assert res.copies_needed == forecast.deletion_copies(8) == 1 + 8 * 5 == 41
    assert forecast.deletion_copies(8, flip_bound=24) == 233  # the Faithfulness page's bound
    assert forecast.deletion_copies(13, flip_bound=24) == 378  # the Explainers page's: 8 explainers, 5 seeds
    assert forecast.deletion_copies(8, flip_bound=None, n_removable=100) == 1 + 8 * (5 + 100)
    assert forecast.deletion_copies(8, flip_bound=24, n_removable=10) == 1 + 8 * (5 + 10)
    with pytest.raises(DeletionError, match="at least one order"):
        forecast.deletion_copies(0)
    with pytest.raises(DeletionError, match="n_removable"):
        forecast.deletion_copies(8, flip_bound=None)


def test_the_deletion_notice(models, timed, monkeypatch):
    m = models["modernbert"]
    a = lv.analyze(m, text_of(3000), 2048)
    assert forecast.deletion_notice(m, a, 8) is None and timed == []  # quick by its arithmetic
    monkeypatch.setattr(budget, "QUICK_FLOPS", 0.0)
    forward = cost.estimate_forward(m, a.n)
    assert forward.seconds == pytest.approx(fwd(m, a.n))
    seconds = 41 * forecast.COPY_FORWARDS * forward.seconds
    assert forecast.deletion_seconds(m, a, 8) == pytest.approx(seconds)
    assert forecast.deletion_notice(m, a, 8) == (
        f"The deletion curves score up to 41 copies of this {a.n:,}-token document: about {format_seconds(seconds)} "
        f"on this machine (cpu), a copy about one forward, estimated from {forward.basis}.")
    assert forecast.deletion_notice(m, a, 8, flip_bound=24, what="The first flips").startswith(
        f"The first flips score up to 233 copies of this {a.n:,}-token document: about "
        f"{format_seconds(233 / 41 * seconds)} on this machine")
    monkeypatch.setattr(forecast, "COPY_FORWARDS", budget.NOTICE_S / 41 / forward.seconds)  # at the threshold
    assert forecast.deletion_notice(m, a, 8) is None
