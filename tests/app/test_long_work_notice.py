"""A page says how long a document's analysis takes before it starts, when that is long (issue 31: ModernBERT-base at
8,192 tokens takes minutes of a 2-core CPU): pages/_ui/current.py through attribution.budget.analysis_notice.
The demo is quick, so the forward's estimate is replaced by a long one and the arithmetic screen is lifted."""
from __future__ import annotations

from longviz_core import cache
from longviz_core.attribution import budget, cost
from pages._ui.keys import K
from tests.support.apps import app_test

MAX_TOKENS = 128


def _notices(at) -> list[str]:
    return [i.value for i in at.info if i.value.startswith("Analysing")]


def test_a_long_analysis_is_announced_before_it_runs(demo, monkeypatch):
    estimated = []

    def forward(model, n_tokens, precision="fp32", **kw):
        estimated.append(n_tokens)
        return cost.Estimate(100.0, n_tokens, 64, True)

    monkeypatch.setattr(cost, "estimate_forward", forward)
    monkeypatch.setattr(budget, "QUICK_FLOPS", 0.0)
    cache.memory_cache().clear()  # the analysis is computed, not read from the cache
    try:
        at = app_test()
        at.session_state[K.MAX_TOKENS] = MAX_TOKENS
        at.session_state[K.DOC_INDEX] = 0
        at.run()
        assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
        assert estimated == [MAX_TOKENS]  # the demo's document 0 is longer: truncated to 128 tokens
        assert _notices(at) == [
            "Analysing 128 tokens with this model takes about 3.7 min on this machine (cpu): the analysis and this "
            "page's views cost about 2.2 forwards, estimated from one forward timed at 64 tokens on this machine, "
            "scaled to 128 tokens by the model's arithmetic."]
        at.run()  # the analysis is cached now: nothing to announce
        assert _notices(at) == [] and estimated == [MAX_TOKENS]
    finally:
        cache.memory_cache().clear()
