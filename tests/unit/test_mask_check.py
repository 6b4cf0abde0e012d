"""The capture's mask check (model.capture._check_mask) and LazyMask's pieces against a dense brute force: the
mask transformers' own builder makes whole, compared pair by pair with the pattern a config names. The check must
pass exactly when the two are the same matrix, whatever the length (one token, odd lengths, more rows than one
piece) and whatever the pieces kept between layers."""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers.masking_utils import (
    and_masks,
    bidirectional_mask_function,
    causal_mask_function,
    padding_mask_function,
    sdpa_mask,
    sliding_window_bidirectional_mask_function,
    sliding_window_causal_mask_function,
)

from longviz_core.model import capture
from longviz_core.model.families import BANDED, CAUSAL, FULL, LayerPattern

LENGTHS = (1, 2, 7, 257, 300)  # several pieces of _ROWS rows, a short last one (257: a single row)


def _functions(n: int):
    """name -> transformers mask function of the kinds the families build."""
    return {"causal": causal_mask_function, "full": bidirectional_mask_function,
            "sliding causal 5": sliding_window_causal_mask_function(5),
            "sliding causal 1": sliding_window_causal_mask_function(1),
            "banded 4": sliding_window_bidirectional_mask_function(4),
            "banded 3": sliding_window_bidirectional_mask_function(3),
            # causal but for the last query, which sees only the 7 keys before it: with a piece holding that row
            # alone, every pair inside the keys it reaches agrees with plain causal attention, and the difference
            # lies outside them
            "causal, last row cut": lambda b, h, q, kv: (kv <= q) & ((q != n - 1) | (kv >= n - 7))}


def _patterns(n: int):
    return [LayerPattern(CAUSAL, 0, n), LayerPattern(CAUSAL, 4, n), LayerPattern(CAUSAL, 5, n),
            LayerPattern(CAUSAL, 1, n), LayerPattern(BANDED, 4, n), LayerPattern(BANDED, 3, n),
            LayerPattern(FULL, 0, n)]


def _dense_pattern(p, n: int) -> torch.Tensor:
    """(n, n) bool by loops over every pair: what the pattern `p` allows."""
    return torch.from_numpy(_loops(p.kind, p.radius, n))


@functools.lru_cache(maxsize=None)
def _loops(kind: str, radius: int, n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype=bool)
    for i in range(n):
        for j in range(n):
            if kind == BANDED:
                out[i, j] = abs(i - j) <= radius
            elif kind == CAUSAL:
                out[i, j] = j <= i and (radius == 0 or j >= i - radius)
            else:
                out[i, j] = True
    return out


def _lazy(n: int, function, attention_mask=None) -> capture.LazyMask:
    return capture._mask(1, n, n, mask_function=function, attention_mask=attention_mask)


def _whole(n: int, function, attention_mask=None) -> torch.Tensor:
    return sdpa_mask(1, n, n, mask_function=function, attention_mask=attention_mask, allow_is_causal_skip=False,
                     allow_is_bidirectional_skip=False)[0, 0]  # (n, n)


@pytest.mark.parametrize("n", LENGTHS)
def test_the_check_passes_exactly_when_the_mask_is_the_pattern(n):
    for name, function in _functions(n).items():
        whole = _whole(n, function)
        mask = _lazy(n, function)
        for p in _patterns(n):
            same = bool((whole == _dense_pattern(p, n)).all())
            for _ in range(2):  # first the pieces as built, then as kept for the next layer of the type
                if same:
                    capture._check_mask(None, mask, n, p, 0)
                else:
                    with pytest.raises(capture.AttentionPatternError, match="layer 0: .* query rows"):
                        capture._check_mask(None, mask, n, p, 0)
            # the same verdict from the dense tensor a model may pass instead of a LazyMask
            if same:
                capture._check_mask(None, whole[None, None], n, p, 0)
            else:
                with pytest.raises(capture.AttentionPatternError):
                    capture._check_mask(None, whole[None, None], n, p, 0)


@pytest.mark.parametrize("n", LENGTHS)
def test_no_mask_is_read_as_sdpa_reads_it(n):
    """No mask: causal where the module is causal (sdpa's is_causal), every pair where it is not."""
    for causal in (True, False):
        seen = _dense_pattern(LayerPattern(CAUSAL if causal else FULL, 0, n), n)
        for p in _patterns(n):
            module = SimpleNamespace(is_causal=causal)
            if bool((seen == _dense_pattern(p, n)).all()):
                capture._check_mask(module, None, n, p, 0)
            else:
                with pytest.raises(capture.AttentionPatternError):
                    capture._check_mask(module, None, n, p, 0)


@pytest.mark.parametrize("n", LENGTHS)
def test_pieces_kind_and_reach_against_the_whole_mask(n):
    """Every piece holds the whole mask's rows a..b-1 over keys lo..hi-1, the mask allows nothing outside them,
    the pieces cover every row once, kind classifies the whole mask, and a second reading (kept) is identical."""
    pad = torch.ones((1, n), dtype=torch.long)
    pad[0, : n // 3] = 0  # left padding: rows of padded queries reach no key
    ones = torch.ones((1, n), dtype=torch.bool)  # an unpadded document's, as transformers hands it over
    cases = {**{name: (f, None) for name, f in _functions(n).items()},
             **{f"{name}, every key allowed": (f, ones) for name, f in _functions(n).items()},
             "causal, a padding mask one key short (the builder refuses the last)": (causal_mask_function, ones[:, 1:]),
             "causal, left-padded": (and_masks(causal_mask_function, padding_mask_function(pad)), pad.bool())}
    for name, (function, attention_mask) in cases.items():
        whole = _whole(n, function, attention_mask)
        mask = _lazy(n, function, attention_mask)
        first = list(mask.pieces())
        assert [(a, b) for a, b, *_ in first] == [(a, min(a + capture._ROWS, n)) for a in range(0, n, capture._ROWS)]
        for a, b, lo, hi, rows in first:
            assert torch.equal(rows[0, 0], whole[a:b, lo:hi]), name
            assert not whole[a:b, :lo].any() and not whole[a:b, hi:].any(), name
            reach = torch.nonzero(whole[a:b].any(0)).flatten()
            assert (lo, hi) == ((int(reach[0]), int(reach[-1]) + 1) if len(reach) else (0, n)), name
        again = list(mask.pieces())
        assert all(x[:4] == y[:4] and torch.equal(x[4], y[4]) for x, y in zip(first, again)) and len(again) == len(first)
        ij = torch.arange(n)
        kind = ("causal" if torch.equal(whole, ij[None, :] <= ij[:, None]) else
                "full" if bool(whole.all()) else "other")
        assert mask.kind == kind, name


def test_pieces_beyond_the_memo_are_built_again(monkeypatch):
    """A mask whose pieces exceed _MEMO_CELLS is not kept: each reading builds its rows again, equal."""
    monkeypatch.setattr(capture, "_MEMO_CELLS", 1000)
    n = 300
    mask = _lazy(n, causal_mask_function)
    built = []
    real = mask.rows
    monkeypatch.setattr(capture.LazyMask, "rows", lambda self, a, b: built.append((a, b)) or real(a, b))
    first, second = list(mask.pieces()), list(mask.pieces())
    assert len(built) == 2 * len(first) and "pieces" not in mask._memo and mask.kind == "causal"
    assert all(torch.equal(x[4], y[4]) for x, y in zip(first, second))
