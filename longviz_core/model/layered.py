"""A document's attention layer by layer, each layer in its own pattern: banded or streamed.

`LayeredAttention.layers[l]` is a one-layer `AttentionBands` (a sliding layer: a band of radius r_l, no global
tokens), a `StreamedLayer` (a full layer: queries and keys, views streamed from them) or a `BlockSparseLayer`
(BigBird's applied block-sparse weights, `block_sparse.py`; views streamed from them the same way). It answers
what the views ask of a document's attention (the interface `AttentionBands` offers for Longformer):
num_layers / num_heads / n, dense / row / column of one head, received attention per head and summed; the
top-k lists and pooled maps are asked of each layer by `views.counts` and `views.pooling`. Nothing here holds
more than one head's n x n matrix at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import SettingsError
from .bands import AttentionBands, check_index, head_weights
from .streamed import StreamedLayer, buffers_reused


DENSE_LAYER_MAX = 2048  # tokens up to which a full layer is made whole for `layer_bands` (12 heads: 0.8 GiB)


@dataclass(frozen=True)
class LayeredAttention:
    layers: tuple  # (layers,) each AttentionBands (one layer), StreamedLayer or BlockSparseLayer
    _received: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.layers:
            raise ValueError("no layers")
        shapes = {(_heads(a), _n(a)) for a in self.layers}
        if len(shapes) != 1:
            raise ValueError(f"layers disagree on heads and tokens: {sorted(shapes)}")
        for a in self.layers:
            if isinstance(a, AttentionBands) and (a.num_layers != 1 or len(a.global_idx)):
                raise ValueError("a banded layer is a one-layer AttentionBands without global tokens")

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        return _heads(self.layers[0])

    @property
    def n(self) -> int:
        return _n(self.layers[0])

    @property
    def windows(self) -> tuple[int, ...]:
        """(layers,) each layer's one-sided reach: the band's radius, n - 1 for a full or block-sparse layer."""
        return tuple(a.window if isinstance(a, AttentionBands) else self.n - 1 for a in self.layers)

    @property
    def window(self) -> int:
        return max(self.windows)

    @property
    def global_idx(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.layers)

    def streamed(self, layer: int) -> bool:
        return isinstance(self.layers[layer], StreamedLayer)

    # ---- one head -------------------------------------------------------------------------------------
    def _layer(self, layer: int, head: int):
        layer, _ = AttentionBands._check(self, layer, head)
        return self.layers[layer]

    def dense(self, layer: int, head: int) -> np.ndarray:
        a = self._layer(layer, head)
        return a.dense(0, head) if isinstance(a, AttentionBands) else a.dense(head)

    def row(self, layer: int, head: int, i: int) -> np.ndarray:
        a = self._layer(layer, head)
        return a.row(0, head, i) if isinstance(a, AttentionBands) else a.row(head, i)

    def column(self, layer: int, head: int, j: int) -> np.ndarray:
        a = self._layer(layer, head)
        return a.column(0, head, j) if isinstance(a, AttentionBands) else a.column(head, j)

    def layer_bands(self, layer: int) -> AttentionBands:
        """Layer `layer` as a one-layer AttentionBands: a banded layer as it is; a full or block-sparse layer as a
        band of width 2n - 1 (heads x n x 2n floats: for explainers that need one layer in banded form at a time)."""
        layer = check_index(layer, self.num_layers, "layer")
        a = self.layers[layer]
        if isinstance(a, AttentionBands):
            return a
        if self.n > DENSE_LAYER_MAX:
            raise SettingsError(f"Layer {layer} attends to all {self.n} tokens: as one band it would take "
                                f"{a.num_heads * self.n * (2 * self.n - 1) * 4 / 2**30:.1f} GiB. Explainers that need "
                                f"a full layer whole work up to {DENSE_LAYER_MAX:,} tokens: lower Max tokens.")
        return AttentionBands.from_full([np.stack([a.dense(h) for h in range(a.num_heads)])[None]], self.n)

    # ---- received attention (Algorithm 4) -------------------------------------------------------------
    def received_per_head(self) -> np.ndarray:
        """Column sums of every head, (layers, heads, n)."""
        if "per_head" not in self._received:
            with buffers_reused():  # the layers' passes one after another
                out = np.stack([a.received_per_head()[0] if isinstance(a, AttentionBands) else a.received()
                                for a in self.layers]).astype(np.float32)  # (layers, heads, n)
            out.setflags(write=False)
            self._received["per_head"] = out
        return self._received["per_head"]

    def received(self, layers=None, heads=None, scale=None) -> np.ndarray:
        """Total attention each token receives over the chosen layers and heads, (n,) (AttentionBands.received)."""
        weights = head_weights(self.num_layers, self.num_heads, layers, heads, scale)
        return np.einsum("lhn,lh->n", self.received_per_head(), weights, optimize=True)


def _heads(a) -> int:
    return a.num_heads


def _n(a) -> int:
    return a.n
