"""One forward of a non-Longformer encoder with each layer's attention kept by its pattern: banded or streamed.

transformers 5 returns attention weights only from its eager implementation, and then as n x n for every layer
(sliding layers included, zeros outside the window). Instead a longviz attention function is registered with
`AttentionInterface` (and sdpa's mask builder, run on chunks of rows, under the same name with `AttentionMaskInterface`): it calls
sdpa for the layer's output, so the model computes what it computes under sdpa (a sliding layer's sdpa on
chunks of rows and the keys their window reaches), and hands each layer's queries and keys (after RoPE) and its
mask to a sink. The sink keeps, on the CPU whatever the model's device (the views read them there, with numpy and
numba's loops),
- a *banded* layer (ModernBERT's sliding layers, radius r = local_attention // 2) as its band, (heads, n,
  2r+1): softmax over the keys |i - j| <= r inside the document, computed from Q and K in chunks of rows;
- a *full* layer (ModernBERT's global layers, BERT / RoBERTa / EuroBERT / GTE) as a `StreamedLayer` (Q, K);
- a *causal* layer (decoders: full or sliding, grouped-query, soft-capped) as a causal `StreamedLayer`.
The layer's pattern comes from the model family (`model/families.py`); the sink checks that the mask the model
built for the layer allows exactly that pattern, so a config read wrongly fails loudly instead of giving other
weights. For a causal layer with full attention transformers builds no mask at all (sdpa runs `is_causal`), so
"no mask" is read through the module's `is_causal`, as sdpa reads it, never as "all pairs".

Masks are never built whole: the mask function registered for longviz returns a `LazyMask`, the recipe
transformers hands its mask builder (sizes, the composed mask function, the padding mask), and rows of it are
built on demand for chunks of queries (a 32,768-token causal mask would be 1 GiB of bools, and transformers'
builder broadcasts int64 indices eight times that). The attention function runs every layer on chunks of query
rows against the keys the chunk's mask rows reach, so the model's output is what its eager or sdpa attention
computes, without an n x n matrix. Decoders run every forward this way (`Family.forward_implementation`), so
deletion tests and Integrated Gradients at 32,768 tokens need no n x n either.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import LongvizError
from .band_products import diagonal_band
from .bands import AttentionBands
from .families import BANDED, CAUSAL, FULL, LayerPattern
from .layered import LayeredAttention
from .streamed import StreamedLayer

IMPLEMENTATION = "longviz"
_ROWS = 256  # query rows per chunk of a layer's attention
_MASK_CELLS = 1 << 22  # query x key cells per chunk of mask rows (transformers' builder holds int64 indices)
_MEMO_CELLS = 1 << 26  # mask cells a LazyMask keeps for its layers (64 MiB of bools: 32,768 rows x 2,048 keys)


class AttentionPatternError(LongvizError, RuntimeError):
    """The model attends in another pattern than its config names (or through a path longviz cannot see)."""


@dataclass(frozen=True, eq=False)
class LazyMask:
    """The mask transformers would build for one layer type, as the recipe it hands the mask builder; rows are
    built on demand, in pieces of query rows over the keys they reach (`pieces`, kept between the layers that
    share the mask); `kind` classifies it: "full" (every pair), "causal" (j <= i) or "other"."""

    batch_size: int
    q_length: int
    kv_length: int
    q_offset: int
    kv_offset: int
    mask_function: object
    attention_mask: torch.Tensor | None
    device: object
    _memo: dict = field(default_factory=dict, repr=False)

    def rows(self, a: int, b: int) -> torch.Tensor:
        """(batch, 1, b - a, keys) bool, True = attend: rows a .. b-1 of the mask."""
        from transformers.masking_utils import sdpa_mask

        return sdpa_mask(self.batch_size, b - a, self.kv_length, q_offset=self.q_offset + a,
                         kv_offset=self.kv_offset, mask_function=self.mask_function,
                         attention_mask=self.attention_mask, allow_is_causal_skip=False,
                         allow_is_bidirectional_skip=False, device=self.device)

    def pieces(self):
        """(a, b, lo, hi, rows a..b-1 over keys lo..hi-1 as (batch, 1, rows, keys) bool) for chunks of at most
        _ROWS query rows and _MASK_CELLS mask cells; keys lo..hi-1 are those the rows reach (every key: none).
        Every layer of one type reads the same mask, and transformers' builder evaluates its mask function on every
        query x key pair (a third of a 32,768-token decoder analysis): the pieces are built once, classifying the
        mask on the way (`kind`), and kept while they hold at most _MEMO_CELLS cells (a window's band at any
        length); a mask reaching further (padding in a full layer) is built again for each reader."""
        if "pieces" in self._memo:
            yield from self._memo["pieces"]
            return
        kept, cells, full, causal = [], 0, True, True
        step = max(1, min(_ROWS, _MASK_CELLS // max(self.kv_length, 1)))
        for a in range(0, self.q_length, step):
            b = min(a + step, self.q_length)
            m = self.rows(a, b)  # (B, 1, rows, keys)
            # read as bytes: torch's integer reductions run many times faster than its bool ones (at 32,768
            # tokens they were twice the time transformers takes to build the rows)
            u = (m if m.dtype == torch.bool else m != 0).view(torch.uint8)  # a mask function may give integers
            if full or causal:  # once neither, nothing more to classify (a sliding mask after its first rows)
                counts = u.sum(dim=-1, dtype=torch.int32)  # (B, 1, rows): keys each row allows
                full = full and bool((counts == self.kv_length).all())
                causal = causal and _causal(u, counts, a + self.q_offset - self.kv_offset)
            cols = torch.nonzero(u.reshape(-1, self.kv_length).amax(dim=0)).flatten()
            # rows that reach no key (a left pad's) run over every key, all masked, as sdpa would run them whole
            lo, hi = (int(cols[0]), int(cols[-1]) + 1) if len(cols) else (0, self.kv_length)
            piece = (a, b, lo, hi, m[..., lo:hi].contiguous())  # a copy: the whole rows are freed
            cells += piece[4].numel()
            if kept is not None and cells <= _MEMO_CELLS:
                kept.append(piece)
            else:
                kept = None
            yield piece
        self._memo["kind"] = "causal" if causal else "full" if full else "other"  # one q x one k is both
        if kept is not None:
            self._memo["pieces"] = kept

    @property
    def kind(self) -> str:
        """"full" (every pair), "causal" (j <= i) or "other", from one pass over the pieces."""
        if "kind" not in self._memo:
            for _ in self.pieces():
                pass
        return self._memo["kind"]


def _causal(u: torch.Tensor, counts: torch.Tensor, first: int) -> bool:
    """Whether mask rows `u` ((B, 1, rows, keys) bytes, 1 = attend) allow exactly the keys j <= first + r in row r
    (first: the first row's position less the keys' offset): each row allows that many keys, k_r, and its first
    refused key is k_r (argmin's first 0), so the k_r it allows are the first ones."""
    keys = u.shape[-1]
    # the rows are on the model's device (a GPU's): the counts they are compared with too
    k = (torch.arange(u.shape[-2], device=u.device) + first + 1).clamp(0, keys)  # (rows,)
    if not bool((counts == k).all()):
        return False
    inside = (k > 0) & (k < keys)  # a row allowing none or every key is settled by its count
    return bool(((u.argmin(dim=-1) == k) | ~inside).all())


def analyze_layers(model, inputs: dict, patterns) -> tuple:
    """Run `model(**inputs)` once (a LoadedModel, batch of one) and return (its output, LayeredAttention);
    `patterns` gives each layer's LayerPattern, from the model family."""
    patterns, num_layers = list(patterns), len(patterns)
    layers: list = []
    checked: set = set()  # (mask, pattern) pairs already compared: layers of one type share one mask

    def sink(module, query, key, mask, scaling, softcap):
        if len(layers) >= num_layers:
            raise AttentionPatternError(f"the model called attention more than its {num_layers} layers")
        p = patterns[len(layers)]
        # kept on the CPU, whatever the model's device: the views read them there (numpy, numba's loops), and a
        # GPU would otherwise hold every layer's Q and K (10.5 GiB for Qwen3-0.6B at 32,768 tokens)
        q, k = (t[0].detach().float().contiguous().cpu() for t in (query, key))  # (heads, n, d)
        scaling = float(scaling if scaling is not None else q.shape[-1] ** -0.5)
        if p.kind not in (BANDED, FULL, CAUSAL) or (p.kind == BANDED and (softcap is not None or
                                                                          k.shape[0] != q.shape[0])):
            raise AttentionPatternError(f"layer {len(layers)}: longviz cannot reproduce a {p.kind} layer with "
                                        f"{k.shape[0]} key/value heads for {q.shape[0]} query heads"
                                        f"{' and soft-capped scores' if softcap is not None else ''}.")
        lazy = isinstance(mask, LazyMask)
        if not (lazy and (mask, p) in checked):
            _check_mask(module, mask, q.shape[1], p, len(layers))
            if lazy:
                checked.add((mask, p))
        if p.kind == BANDED:
            layers.append(band_of(q, k, scaling, p.radius))
        else:
            layers.append(StreamedLayer(q, k, scaling, causal=p.kind == CAUSAL, reach=p.radius,
                                        softcap=None if softcap is None else float(softcap)))

    with _capturing(model.model, sink):
        out = model(**inputs)
    if len(layers) != num_layers:
        raise AttentionPatternError(f"saw attention in {len(layers)} of the model's {num_layers} layers: this "
                                    "model computes attention outside transformers' attention interface.")
    return out, LayeredAttention(tuple(layers))


def band_of(q: torch.Tensor, k: torch.Tensor, scaling: float, r: int) -> AttentionBands:
    """A sliding layer's attention as a one-layer band (1, heads, n, 2r+1): query i over keys i - r .. i + r
    inside the document, exact float32 softmax; column c is key i - r + c (the bands' layout)."""
    H, n, d = q.shape
    width = 2 * r + 1
    local = np.zeros((1, H, n, width), dtype=np.float32)  # (1, heads, n, 2r+1)
    padded = torch.zeros((H, n + 2 * r, d), dtype=q.dtype)
    padded[:, r : r + n] = k  # key j at j + r
    inside = torch.zeros(n + 2 * r, dtype=torch.bool)
    inside[r : r + n] = True
    for a in range(0, n, _ROWS):
        b = min(a + _ROWS, n)
        scores = torch.matmul(q[:, a:b], padded[:, a : b + 2 * r].transpose(-1, -2)) * scaling  # (H, c, c+2r)
        scores = scores.masked_fill(~inside[a : b + 2 * r], float("-inf"))
        band = diagonal_band(scores, width)  # (H, c, 2r+1): row t, column c = key a + t - r + c
        local[0, :, a:b] = torch.softmax(band, dim=-1, dtype=torch.float32).numpy()
    empty_c, empty_r = np.zeros((1, H, n, 0), np.float32), np.zeros((1, H, 0, n), np.float32)
    return AttentionBands(local, empty_c, empty_r, np.zeros(0, dtype=np.int64), r, (r,))


def _reach(p, a: int, b: int, n: int) -> tuple[int, int]:
    """(lo, hi): the keys lo .. hi-1 that query rows a .. b-1 of the pattern `p` reach, together."""
    if p.kind == BANDED:
        return max(0, a - p.radius), min(n, b + p.radius)
    if p.kind == CAUSAL:
        return (max(0, a - p.radius) if p.radius else 0), b
    return 0, n


def _expected(p, a: int, b: int, lo: int, hi: int, device=None) -> torch.Tensor:
    """(b - a, hi - lo) bool on `device` (the CPU: None): rows a .. b-1, keys lo .. hi-1 of the pattern `p`."""
    i, j = torch.arange(a, b, device=device)[:, None], torch.arange(lo, hi, device=device)[None, :]
    if p.kind == BANDED:
        return (i - j).abs() <= p.radius
    if p.kind == CAUSAL:
        return (j <= i) & (j >= i - p.radius) if p.radius else j <= i
    return torch.ones((b - a, hi - lo), dtype=torch.bool, device=device)


def _check_mask(module, mask, n: int, p, layer: int) -> None:
    """The mask the model built for this layer (a LazyMask, a bool tensor, or None: every pair, or causal where
    the module is causal, as sdpa reads it) must allow exactly the pattern `p` the config names. Read in pieces of
    query rows over the keys lo .. hi-1 outside which the mask allows nothing: the pattern must reach no key
    outside them either, and allow the same pairs inside."""
    if mask is None:
        seen = LayerPattern(CAUSAL if getattr(module, "is_causal", False) else FULL, 0, n)
        if (seen.kind, seen.radius) == (p.kind, p.radius):
            return
        parts = ((a, b, *_reach(seen, a, b, n), _expected(seen, a, b, *_reach(seen, a, b, n)))
                 for a, b in ((a, min(a + _ROWS, n)) for a in range(0, n, _ROWS)))
    elif isinstance(mask, LazyMask):
        parts = ((a, b, lo, hi, m[0, 0]) for a, b, lo, hi, m in mask.pieces())
    else:
        m = mask[0, 0] if mask.dim() == 4 else mask
        if m.shape[-2:] != (n, n):
            raise AttentionPatternError(f"layer {layer}: a mask of shape {tuple(m.shape)} for {n} tokens")
        m = m if m.dtype == torch.bool else m == 0
        parts = ((a, min(a + _ROWS, n), 0, n, m[a : a + _ROWS]) for a in range(0, n, _ROWS))
    for a, b, lo, hi, rows in parts:  # rows: (b - a, hi - lo) on the mask's device (the model's)
        want_lo, want_hi = _reach(p, a, b, n)
        if not (lo <= want_lo and want_hi <= hi and bool((rows == _expected(p, a, b, lo, hi, rows.device)).all())):
            what = {CAUSAL: f"causal attention{f' reaching {p.radius} tokens back' if p.radius else ''}",
                    BANDED: f"a sliding window of radius {p.radius}"}.get(p.kind, "full attention")
            raise AttentionPatternError(f"layer {layer}: the config names {what}, but the model's mask differs "
                                        f"from it in query rows {a}..{b - 1} ({int(rows.sum())} pairs allowed "
                                        "there): longviz cannot show this layer's attention.")


# ---------------------------------------------------------------------------------------------- plumbing
_LOCAL = threading.local()


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, is_causal=None,
               **kwargs):
    """The layer's attention as the model computes it (sdpa, or eager's arithmetic where sdpa cannot: Gemma 2's
    soft-capped scores), its queries, keys and mask to the current sink first. A LazyMask that is neither full
    nor causal (a sliding window, padding) runs on chunks of query rows against the keys their mask rows reach:
    the keys left out are masked for those rows, so every row's softmax and output are the ones computed on the
    whole, without (heads, n, n) scores."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    sink = getattr(_LOCAL, "sink", None)
    if sink is not None:
        sink(module, query, key, attention_mask, scaling, softcap)
    if softcap is not None:
        return _capped(module, query, key, value, attention_mask, scaling, softcap), None
    if not isinstance(attention_mask, LazyMask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    kind, n = attention_mask.kind, query.shape[-2]
    if kind in ("full", "causal"):
        if _math_only(query, key):
            return _sdpa_expanded(query, key, value, kind == "causal", dropout, scaling), None
        return sdpa_attention_forward(module, query, key, value, None, dropout=dropout, scaling=scaling,
                                      is_causal=kind == "causal", **kwargs)
    parts = []
    for a, b, lo, hi, m in _row_chunks(attention_mask, n):
        parts.append(sdpa_attention_forward(module, query[..., a:b, :], key[..., lo:hi, :], value[..., lo:hi, :],
                                            m, dropout=dropout, scaling=scaling, **kwargs)[0])  # (B, rows, heads, d)
    return torch.cat(parts, dim=1), None


def _math_only(query, key) -> bool:
    """True where transformers' sdpa would ask for grouped-query attention that only sdpa's math kernel serves: on
    CUDA, in float32, with fewer K/V heads than query heads and no mask, transformers passes enable_gqa, which the
    flash kernel serves in half precision alone (torch 2.11). The math kernel holds every head's n x n scores: the
    first H200 run (benchmarks/gpu.py) asked for 16 GiB at a time at 32,768 tokens and ran out of 139 GiB."""
    return query.device.type == "cuda" and query.dtype == torch.float32 and key.shape[1] < query.shape[1]


def _sdpa_expanded(query, key, value, causal: bool, dropout: float, scaling) -> torch.Tensor:
    """sdpa over whole rows (no mask; causal or not) with the K/V heads repeated to the query heads, as
    transformers' repeat_kv does, so that the memory-efficient kernel serves float32. (B, n, heads, d) as
    sdpa_attention_forward's output."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # (B, heads, n, d)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, dropout_p=dropout, scale=scaling, is_causal=causal and query.shape[2] > 1)
    return out.transpose(1, 2).contiguous()  # (B, n, heads, d)


def _row_chunks(mask, n: int):
    """(a, b, lo, hi, mask rows a..b-1 over keys lo..hi-1) for chunks of at most _ROWS query rows and _MASK_CELLS
    mask cells; keys lo..hi-1 are the ones the rows reach (LazyMask.pieces). `mask` a LazyMask, or None: every
    pair."""
    if mask is not None:
        yield from mask.pieces()
        return
    step = max(1, min(_ROWS, _MASK_CELLS // max(n, 1)))
    for a in range(0, n, step):
        yield a, min(a + step, n), 0, n, None


def _capped(module, query, key, value, mask, scaling, softcap) -> torch.Tensor:
    """Eager attention with soft-capped scores (Gemma 2: cap * tanh(s / cap) before the mask), in chunks of rows,
    float32 softmax; grouped-query heads by a broadcast matmul. (B, n, heads, d) as sdpa's output."""
    B, H, n, d = query.shape
    kv = key.shape[1]
    scaling = scaling if scaling is not None else d ** -0.5
    if mask is None and getattr(module, "is_causal", False):
        raise AttentionPatternError("a soft-capped causal layer without a mask: longviz builds its masks lazily "
                                    "and cannot tell which pairs this layer allows.")
    if mask is not None and not isinstance(mask, LazyMask):
        raise AttentionPatternError("a soft-capped layer with a mask longviz did not build.")
    parts = []
    for a, b, lo, hi, m in _row_chunks(mask, n):
        q = query[:, :, a:b].reshape(B, kv, H // kv, b - a, d)  # (B, kv, g, rows, d)
        k, v = key[:, :, lo:hi].unsqueeze(2), value[:, :, lo:hi].unsqueeze(2)  # (B, kv, 1, keys, d)
        s = torch.matmul(q, k.transpose(-1, -2)) * scaling  # (B, kv, g, rows, keys)
        s = torch.tanh(s / softcap) * softcap
        if m is not None:
            s = s.masked_fill(~m.unsqueeze(1), float("-inf"))  # m: (B, 1, rows, keys) -> (B, 1, 1, rows, keys)
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(query.dtype)
        parts.append(torch.matmul(p, v).reshape(B, H, b - a, d))  # (B, heads, rows, d)
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()  # (B, n, heads, d)


def _mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
          mask_function=None, attention_mask=None, device="cpu", **kwargs):
    """The mask as a LazyMask (its rows built on demand by transformers' own sdpa builder)."""
    from transformers.masking_utils import causal_mask_function

    # a padding mask that allows every key it covers leaves the other functions' pattern as it is: left out, the
    # builder skips its per-cell lookup (128 causal rows of 32,768 keys: 10 ms with it, 3.7 ms without). A shorter
    # one is kept: the builder pads it with refusals
    if attention_mask is not None and attention_mask.shape[-1] >= kv_offset + kv_length and bool(attention_mask.all()):
        attention_mask = None
    return LazyMask(int(batch_size), int(q_length), int(kv_length), int(q_offset), int(kv_offset),
                    mask_function or causal_mask_function, attention_mask, device)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, _attention)
    AttentionMaskInterface.register(IMPLEMENTATION, _mask)


def use_longviz_attention(model: torch.nn.Module) -> None:
    """Every later forward of `model` runs through longviz's chunked attention (no sink: no capture)."""
    _register()
    model.config._attn_implementation = IMPLEMENTATION


@contextmanager
def implementation(model: torch.nn.Module, name: str):
    """Forwards of `model` inside the block run transformers' `name` attention ("eager": the weights returned)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


@contextmanager
def _capturing(model: torch.nn.Module, sink):
    """The model runs through longviz's attention with `sink` receiving each layer; restored in `finally`."""
    _register()
    _LOCAL.sink = sink
    try:
        with implementation(model, IMPLEMENTATION):
            yield
    finally:
        _LOCAL.sink = None
