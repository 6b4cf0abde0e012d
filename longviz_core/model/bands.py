"""Longformer's attention kept in its native banded form.

A head's attention over n tokens is stored as
  local        (n, 2w+1): query i -> key i - w + c (c = column); zero outside [0, n), at global keys and on
                           the rows of global queries (transformers leaves those rows zero);
  global_cols  (n, g):    query i -> global key k (what the band leaves out);
  global_rows  (g, n):    global query k -> every key (the rows the band leaves out).
Every row of the reassembled (n, n) matrix sums to 1. Views are computed from these pieces, so the memory
stays O(layers * heads * n * w); no function here builds n x n for more than one head at a time.
Full-attention encoders (BERT/RoBERTa) use the same class with w = n - 1 and no global tokens.

Per-layer windows: Longformer's `attention_window` may differ by layer (layer l sees |i - j| <= w_l). Every
layer's band is then stored at the largest window w = max(w_l), centred, with zeros in the w - w_l columns on
each side that lie outside layer l's own window. Zeros are what the band already holds outside the document,
so every view (sums, top-k, pooling) treats those columns as it treats any key outside the document and needs
no per-layer case. The price is 2 (w - w_l) columns of zeros per row of a narrower layer (the band holds
layers * heads * n * (2w + 1) floats whatever the windows); checkpoints with one window for all layers (every
released Longformer) store nothing extra.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..errors import SelectionError, SettingsError, whole_number
from . import _kernels


@dataclass(frozen=True)
class AttentionBands:
    local: np.ndarray  # (layers, heads, n, 2w+1) float32; 0 where key i - w + c is outside the document
    #                                               or outside the layer's own window (|c - w| > windows[l])
    global_cols: np.ndarray  # (layers, heads, n, g) float32
    global_rows: np.ndarray  # (layers, heads, g, n) float32
    global_idx: np.ndarray  # (g,) int64 positions of the global tokens
    window: int  # one-sided window w of the band: the largest of the layers' windows
    windows: tuple[int, ...] | None = None  # (layers,) each layer's one-sided window w_l <= w (None given: all w)
    _received: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        L, H, n, width = self.local.shape
        g = len(self.global_idx)
        if width != 2 * self.window + 1:
            raise ValueError(f"band width {width} does not match window {self.window}")
        windows = (self.window,) * L if self.windows is None else tuple(int(w) for w in self.windows)
        if len(windows) != L or any(not 0 <= w <= self.window for w in windows):
            raise ValueError(f"per-layer windows {list(windows)} must be {L} values in 0..{self.window}")
        object.__setattr__(self, "windows", windows)
        if self.global_cols.shape != (L, H, n, g) or self.global_rows.shape != (L, H, g, n):
            raise ValueError("global attention shapes do not match the band")
        for a in (self.local, self.global_cols, self.global_rows):
            a.setflags(write=False)  # shared through caches: treat as read-only

    @property
    def num_layers(self) -> int:
        return self.local.shape[0]

    @property
    def num_heads(self) -> int:
        return self.local.shape[1]

    @property
    def n(self) -> int:
        return self.local.shape[2]

    @property
    def nbytes(self) -> int:
        return self.local.nbytes + self.global_cols.nbytes + self.global_rows.nbytes

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_longformer(cls, attentions, global_attentions, global_idx, n: int) -> "AttentionBands":
        """From transformers' outputs for a batch of one: `attentions[l]` (1, H, n, g+2w_l+1) with layer l's
        own window w_l, `global_attentions[l]` (1, H, n_padded, g) with the key axis first. A layer narrower
        than the widest is placed in the middle columns of the band (see the module docstring)."""
        global_idx = np.asarray(global_idx, dtype=np.int64)
        g = len(global_idx)
        windows = tuple((att.shape[-1] - g - 1) // 2 for att in attentions)
        w = max(windows)
        L, H = len(attentions), attentions[0].shape[1]
        alloc = np.empty if len(set(windows)) == 1 else np.zeros  # zero-filled only if a layer leaves columns
        local = alloc((L, H, n, 2 * w + 1), dtype=np.float32)  # (layers, heads, n, 2w+1)
        gcols = np.empty((L, H, n, g), dtype=np.float32)  # (layers, heads, n, g)
        grows = np.empty((L, H, g, n), dtype=np.float32)  # (layers, heads, g, n)
        for layer, (att, w_l) in enumerate(zip(attentions, windows)):
            att = _np(att)[0, :, :n]  # (H, n, g + 2w_l + 1)
            gcols[layer] = att[..., :g]
            local[layer, :, :, w - w_l : w + w_l + 1] = att[..., g:]
            if g:
                grows[layer] = np.swapaxes(_np(global_attentions[layer])[0, :, :n, :], -1, -2)
        return cls(local, gcols, grows, global_idx, w, windows)

    @classmethod
    def from_full(cls, attentions, n: int) -> "AttentionBands":
        """From a full-attention encoder's `attentions[l]` (1, H, n, n): a band with w = n - 1."""
        L, H = len(attentions), attentions[0].shape[1]
        w = n - 1
        local = np.zeros((L, H, n, 2 * w + 1), dtype=np.float32)  # (layers, heads, n, 2n-1)
        rows = np.arange(n)[:, None]
        cols = w - rows + np.arange(n)[None, :]  # key j sits in column w - i + j
        for layer, att in enumerate(attentions):
            local[layer][:, rows, cols] = _np(att)[0, :, :n, :n]
        empty_c = np.zeros((L, H, n, 0), dtype=np.float32)
        empty_r = np.zeros((L, H, 0, n), dtype=np.float32)
        return cls(local, empty_c, empty_r, np.zeros(0, dtype=np.int64), w, (w,) * L)

    def layer_bands(self, layer: int) -> "AttentionBands":
        """Layer `layer` alone, as a one-layer AttentionBands (views of these arrays, at this band's window)."""
        layer = check_index(layer, self.num_layers, "layer")
        sl = slice(layer, layer + 1)
        return AttentionBands(self.local[sl], self.global_cols[sl], self.global_rows[sl], self.global_idx,
                              self.window, (self.windows[layer],))

    # ---- one head -------------------------------------------------------------------------------------
    def _check(self, layer: int, head: int) -> tuple[int, int]:
        """(layer, head) as ints when this model has them, else SelectionError naming the ranges."""
        return check_index(layer, self.num_layers, "layer"), check_index(head, self.num_heads, "head")

    def dense(self, layer: int, head: int) -> np.ndarray:
        """The (n, n) attention matrix of one head (rows = queries, sum to 1)."""
        layer, head = self._check(layer, head)
        n, w = self.n, self.window
        out = np.zeros((n, n), dtype=np.float32)  # (n, n)
        i = np.arange(n)[:, None]
        j = i - w + np.arange(2 * w + 1)[None, :]
        valid = (j >= 0) & (j < n)
        out[np.broadcast_to(i, j.shape)[valid], j[valid]] = self.local[layer, head][valid]
        if len(self.global_idx):
            out[:, self.global_idx] += self.global_cols[layer, head]
            out[self.global_idx, :] = self.global_rows[layer, head]
        return out

    def _check_position(self, position, what: str) -> int:
        return whole_number(position, f"{what} position", 0, self.n - 1, error=SelectionError)

    def row(self, layer: int, head: int, i: int) -> np.ndarray:
        """Query i's attention over all keys, (n,)."""
        layer, head = self._check(layer, head)
        i = self._check_position(i, "Query")
        n, w = self.n, self.window
        out = np.zeros(n, dtype=np.float32)
        gpos = np.flatnonzero(self.global_idx == i)
        if gpos.size:
            return self.global_rows[layer, head, gpos[0]].copy()
        lo, hi = max(0, i - w), min(n, i + w + 1)
        out[lo:hi] = self.local[layer, head, i, lo - (i - w) : hi - (i - w)]
        out[self.global_idx] += self.global_cols[layer, head, i]
        return out

    def column(self, layer: int, head: int, j: int) -> np.ndarray:
        """Attention every query gives key j, (n,)."""
        layer, head = self._check(layer, head)
        j = self._check_position(j, "Key")
        n, w = self.n, self.window
        out = np.zeros(n, dtype=np.float32)
        lo, hi = max(0, j - w), min(n, j + w + 1)
        qs = np.arange(lo, hi)
        out[lo:hi] = self.local[layer, head, qs, j - qs + w]
        gpos = np.flatnonzero(self.global_idx == j)
        if gpos.size:
            out += self.global_cols[layer, head, :, gpos[0]]
        out[self.global_idx] = self.global_rows[layer, head, :, j]
        return out

    # ---- received attention (Algorithm 4) -------------------------------------------------------------
    def received_per_head(self) -> np.ndarray:
        """Column sums of every head, (layers, heads, n): the attention each token receives."""
        if "per_head" not in self._received:
            parts = by_layers(lambda s: _column_sums(self.local[s], self.window), self.num_layers)
            out = np.concatenate(parts, axis=0)  # (layers, heads, n)
            if len(self.global_idx):
                out[..., self.global_idx] += self.global_cols.sum(axis=2)
                out += self.global_rows.sum(axis=2)
            out.setflags(write=False)
            self._received["per_head"] = out
        return self._received["per_head"]

    def received(self, layers=None, heads=None, scale=None) -> np.ndarray:
        """Total attention each token receives, summed over the chosen layers and heads, (n,).

        `scale` is an optional (layers, heads) weight per head (e.g. head importance)."""
        per_head = self.received_per_head()
        weights = head_weights(self.num_layers, self.num_heads, layers, heads, scale)
        return np.einsum("lhn,lh->n", per_head, weights, optimize=True)


def head_weights(num_layers: int, num_heads: int, layers=None, heads=None, scale=None) -> np.ndarray:
    """(layers, heads) weights: 1 on the selected heads (times `scale`), 0 elsewhere; validated."""
    num_layers = whole_number(num_layers, "num_layers", lo=1)
    num_heads = whole_number(num_heads, "num_heads", lo=1)
    sel_l = selection(layers, num_layers, "layer")
    sel_h = selection(heads, num_heads, "head")
    weights = np.zeros((num_layers, num_heads), dtype=np.float64)
    weights[np.ix_(sel_l, sel_h)] = 1.0
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float64)
        if scale.shape != (num_layers, num_heads):
            raise SettingsError(f"scale (e.g. head importance) must have one weight per layer and head, shape "
                                f"({num_layers}, {num_heads}), got {scale.shape}: compute it for this model.")
        if not np.all(np.isfinite(scale)):
            raise SettingsError("scale (e.g. head importance) contains NaN or infinite values: every head needs a "
                                "finite weight.")
        weights *= scale
    return weights


def selection(chosen, size: int, what: str) -> np.ndarray:
    """The chosen layer or head indices (None = all of `size`), validated; `what` names them in errors."""
    if chosen is None:
        return np.arange(size)
    listed = np.atleast_1d(np.asarray(chosen, dtype=object)).ravel()  # as given: 2.5 and "3" stay what they are
    if listed.size == 0:
        raise SelectionError(f"Select at least one {what} (or None for all {size}).")
    try:
        return np.asarray([check_index(i, size, what) for i in listed], dtype=np.int64)
    except SelectionError as exc:
        raise SelectionError(f"Selected {what}s {listed.tolist()}: {exc}") from None


def check_index(index, size: int, what: str) -> int:
    """A layer or head index (0-based) as an int when the model has it, else SelectionError naming the range."""
    return whole_number(index, f"{what} index (this model has {what}s 0..{size - 1}, 0-based)", 0, size - 1,
                        error=SelectionError)


def by_layers(fn, num_layers: int, workers: int | None = None) -> list:
    """[fn(layer slice), ...] over contiguous slices of the layers, on up to `workers` threads (default: up to
    2, the cores of a small machine). The passes over the bands spend their time in compiled loops that
    release the GIL (`_kernels`), so two threads work on two layers at once; results come back in layer order."""
    workers = max(1, min(default_workers(workers), num_layers))
    bounds = np.linspace(0, num_layers, workers + 1).round().astype(int)
    slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    if workers == 1:
        return [fn(slices[0])]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, slices))


def default_workers(workers: int | None) -> int:
    """`workers` threads (checked: a whole number >= 1), or by default up to 2, the cores of a small machine."""
    return min(2, os.cpu_count() or 1) if workers is None else whole_number(workers, "workers (threads)", lo=1)


def _column_sums(local: np.ndarray, w: int) -> np.ndarray:
    """Sum each band row into its keys (row i's column c goes to key i - w + c), head by head in compiled
    loops: (layers, heads, n, 2w+1) -> (layers, heads, n)."""
    *lead, n, width = local.shape
    out = np.empty((*lead, n), dtype=np.float32)
    for idx in np.ndindex(*lead):
        _kernels.column_sums(np.ascontiguousarray(local[idx], dtype=np.float32), w, out[idx])
    return out


def _np(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t
    return t.detach().float().cpu().numpy()
