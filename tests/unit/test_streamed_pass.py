"""A streamed layer's one pass (longviz_core.model.streamed) against brute force on its own dense heads, with ties
everywhere: queries and keys of small integers and a power-of-two scaling make every score exact, so equal
scores give equal probabilities, and the oracle's probabilities are the pass's own, bit for bit. The band and
chunks are made small, so that one head's rows go in a first band of several chunks (the keys' thresholds over
it), then in chunks (the floors alone), the keys' candidates merged every third chunk. The lists are the
pass's own length, k = 64 (DEFAULT_K: a shorter list is a prefix of them)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from longviz_core.model import streamed
from longviz_core.model.streamed import StreamedLayer
from support.oracles import block_means, brute_topk

N, K, BLOCK = 403, streamed.DEFAULT_K, 16  # tokens (odd: a short last chunk, band and block), list, block


@pytest.fixture(autouse=True)
def small_bands(monkeypatch):
    monkeypatch.setattr(streamed, "_CHUNK_ROWS", 16)
    monkeypatch.setattr(streamed, "_BAND_BYTES", 4 * N * 144)  # a first band of 144 rows (2 k chunks and more)
    monkeypatch.setattr(streamed, "_MERGE_ROWS", 40)  # then the keys' candidates merged every third chunk


def _layer(seed, heads=2, kv_heads=2, **kwargs) -> StreamedLayer:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-2, 3, (heads, N, 8), generator=g).float()
    k = torch.randint(-2, 3, (kv_heads, N, 8), generator=g).float()
    return StreamedLayer(q, k, 0.25, **kwargs)


def _assert_summary_is_brute_force(layer: StreamedLayer, k: int = K):
    s = layer.summary(k=k, block=BLOCK)
    edges = np.minimum(np.arange(0, N + BLOCK, BLOCK), N).astype(float)
    sizes = np.diff(edges)
    assert (s.attended >= -1).all() and s.attended.shape == (layer.num_heads, N, k)
    for h in range(layer.num_heads):
        dense = layer.dense(h)
        for lists, m in ((s.attended[h], dense), (s.attending[h], dense.T)):
            for i, listed in enumerate(brute_topk(m, k)):
                assert lists[i].tolist() == listed + [-1] * (k - len(listed)), (h, i)
        np.testing.assert_array_equal(s.cls_row[h], dense[0])
        np.testing.assert_allclose(s.received[h], dense.sum(axis=0, dtype=np.float64), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(s.block_sums[h] / np.outer(sizes, sizes), block_means(dense, edges), atol=1e-7)


@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"causal": True, "reach": 30},
                                    {"heads": 4, "kv_heads": 2, "causal": True}, {"softcap": 1.5}],
                         ids=["full", "causal", "sliding", "grouped", "softcap"])
def test_one_pass_equals_brute_force_with_ties(kwargs):
    layer = _layer(seed=len(str(kwargs)), **kwargs)
    rows = [layer.dense(h) for h in range(layer.num_heads)]
    ties = sum(len(r) - len(np.unique(r)) for d in rows for r in d)
    assert ties > 50 * N  # tied values throughout: the order rule decides much of the lists
    _assert_summary_is_brute_force(layer)


def test_uniform_attention_lists_the_first_positions():
    """Every entry of a row equal: every entry is a candidate, more than a band's buffers hold, so the band's
    candidates go in parts; the lists are the lowest positions, as ties go to the lower position."""
    layer = StreamedLayer(torch.zeros(2, N, 8), torch.ones(2, N, 8), 0.25)
    s = layer.summary(k=K, block=BLOCK)
    np.testing.assert_array_equal(s.attended, np.broadcast_to(np.arange(K), (2, N, K)))
    np.testing.assert_array_equal(s.attending, np.broadcast_to(np.arange(K), (2, N, K)))
    _assert_summary_is_brute_force(layer)


def test_a_list_longer_than_a_causal_row_is_padded():
    layer = _layer(seed=5, causal=True, reach=4)  # each query sees at most 5 keys, each key at most 5 queries
    _assert_summary_is_brute_force(layer)
    s = layer.summary(k=K, block=BLOCK)
    assert (s.attended[:, :, 5:] == -1).all() and (s.attending[:, :, 5:] == -1).all()
    assert (s.attended[:, 4:, :5] >= 0).all()


def test_thresholds_admit_exactly_the_top_k():
    """A row's threshold is the k-th largest maximum of its 2 k interleaved chunks (keys x, x + 2 k, ...), a
    key's the k-th largest of its maxima over 2 k interleaved chunks of a band's rows. Here query i < 2 k meets
    key 0 at score (i + 1) / 64 (query 1 one more) and keys x < 2 k meet query 1 at (x + 1) / 64 (key 0 two
    more), every other score is 0: one large entry per chunk, so exactly k entries reach each threshold."""
    q, k = torch.zeros(1, N, 8), torch.zeros(1, N, 8)
    q[0, : 2 * K, 0] = torch.arange(1, 2 * K + 1)
    k[0, 0, 0] = 1.0
    q[0, 1, 1] = 1.0
    k[0, : 2 * K, 1] = torch.arange(1, 2 * K + 1)
    layer = StreamedLayer(q, k, 1 / 64)
    _assert_summary_is_brute_force(layer)
    s = layer.summary(k=K, block=BLOCK)
    assert s.attending[0, 0].tolist() == list(range(2 * K - 1, K - 1, -1))  # key 0: queries 2k - 1 ... k
    assert s.attended[0, 1].tolist() == list(range(2 * K - 1, K - 1, -1))  # query 1: keys 2k - 1 ... k


def test_later_bands_enter_a_keys_list_at_its_last_places():
    """Key 0's list after the first band is queries 127 ... 64 (scores 256 ... 130, / 128); query 200 and query
    300 (later chunks, merged apart: floors alone) both score 133, between queries 66 and 65: each enters above
    the floor, 300 after 200 (tie: the lower position first), and 65 and 64 drop."""
    q, k = torch.zeros(1, N, 8), torch.zeros(1, N, 8)
    q[0, : 2 * K, 0] = 2 * torch.arange(1, 2 * K + 1)
    q[0, [200, 300], 0] = 133.0
    k[0, 0, 0] = 1.0
    layer = StreamedLayer(q, k, 1 / 128)
    _assert_summary_is_brute_force(layer)
    assert layer.summary(k=K, block=BLOCK).attending[0, 0].tolist() == [*range(2 * K - 1, K + 1, -1), 200, 300]


def test_worker_buffers_serve_the_next_pass_without_carrying_anything_over(monkeypatch):
    """Within `buffers_reused`, a pass takes the buffers the last pass of the same shape left (made once), and
    its summary is the one a pass with new buffers makes: a full layer after a causal one and the reverse, on
    other values. Outside, and after, every pass makes its own."""
    made, real = [], streamed._HeadState
    monkeypatch.setattr(streamed, "_HeadState", lambda *shape: made.append(shape) or real(*shape))
    monkeypatch.setattr(streamed, "_WORKERS", 1)
    layers = [_layer(seed=11, causal=True), _layer(seed=12), _layer(seed=13, causal=True, reach=30)]
    alone = [StreamedLayer(a.query, a.key, a.scaling, a.causal, a.reach).summary(k=K, block=BLOCK) for a in layers]
    assert len(made) == 3
    with streamed.buffers_reused():
        kept = [a.summary(k=K, block=BLOCK) for a in layers]
        assert len(made) == 4 and streamed._SPARE
    assert not streamed._SPARE
    for a, b in zip(alone, kept):
        for name in ("received", "cls_row", "attended", "attending", "block_sums"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
