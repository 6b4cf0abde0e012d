"""Per-head attention maps pooled onto a fixed grid, for the layers x heads heatmap grid (paper 3.1.1, Fig. 4).

A document of n tokens is cut into blocks of B = ceil(n / grid) consecutive positions (the last block may be
shorter), giving ceil(n / B) <= grid blocks per axis. Cell (a, b) of a head is the mean attention from the
queries of block a to the keys of block b, i.e. the block mean of that head's dense matrix; it is computed
from the bands without building the matrix (a full layer of a `LayeredAttention`: from its streamed pass).

Dataset-wide (the paper's "averaged aggregate attention for all examples"): every document's cells are placed
on a common grid of relative positions (cell a covers the fraction [a / grid, (a + 1) / grid) of a document;
each takes the value of the document block holding its centre), then averaged over documents.

For display every head is normalised by its largest cell (`normalised_maps`), as the paper (after T3-vis)
normalises each attention matrix before drawing it, optionally scaled by head importance.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import LongvizError, SelectionError, whole_number
from ..model import _kernels
from ..model.bands import AttentionBands, by_layers
from ..model.layered import LayeredAttention
from ..model.streamed import buffers_reused
from ..progress import Progress, report

GRID_SIZES: tuple[int, ...] = (32, 64, 128)
DEFAULT_GRID = 64


class PoolingError(LongvizError, ValueError):
    """Inputs the heatmap grid cannot pool or draw (not attention bands, a bad grid size or head scale, documents
    from different models, none at all)."""


@dataclass(frozen=True)
class PooledAttention:
    cells: np.ndarray  # (layers, heads, g, g) float32: mean attention from query block to key block
    edges: np.ndarray  # (g + 1,) float64: block boundaries, token positions (document) or fractions (dataset)
    n_documents: int  # 1 for a document, the number averaged for a dataset
    relative: bool  # True when edges are fractions of each document's length

    def __post_init__(self):
        self.cells.setflags(write=False)

    @property
    def grid(self) -> int:
        return self.cells.shape[-1]

    @property
    def nbytes(self) -> int:
        return self.cells.nbytes + self.edges.nbytes


def pool_attention(bands: AttentionBands, grid: int = DEFAULT_GRID) -> PooledAttention:
    """Block means of every head's attention, from the bands: (layers, heads, g, g), g = ceil(n / B)."""
    if not isinstance(bands, (AttentionBands, LayeredAttention)):
        raise PoolingError(f"Expected AttentionBands, got {type(bands).__name__}: pass an analysis's attention "
                           "(analyze(model, text).attention).")
    grid = check_grid(grid)
    n = bands.n
    block = -(-n // grid)
    g = -(-n // block)
    if isinstance(bands, LayeredAttention):  # layer by layer: a band's kernel, or a full layer's streamed pass
        with buffers_reused():
            sums = np.stack([_bands_sums(a, block, g)[0] if isinstance(a, AttentionBands)
                             else a.summary(block=block).block_sums for a in bands.layers])  # (layers, heads, g, g)
    else:
        sums = np.concatenate(by_layers(lambda s: _bands_sums(bands, block, g, s), bands.num_layers), axis=0)
    sizes = np.minimum(np.arange(g) * block + block, n) - np.arange(g) * block  # (g,)
    cells = (sums / (sizes[:, None] * sizes[None, :])).astype(np.float32)
    edges = np.minimum(np.arange(g + 1) * block, n).astype(np.float64)
    return PooledAttention(cells, edges, 1, relative=False)


def pool_dataset(
    documents: Iterable[AttentionBands],
    grid: int = DEFAULT_GRID,
    total: int | None = None,
    progress: Progress | None = None,
) -> PooledAttention:
    """Average of the documents' pooled maps on a common grid of relative positions.

    `documents` may be a generator (each analysis is pooled then dropped); `total` is only used for progress."""
    grid = check_grid(grid)
    if total is not None:
        total = whole_number(total, "total (documents, for progress)", lo=0, error=PoolingError)
    acc = None
    count = 0
    for bands in documents:
        doc = pool_attention(bands, grid)
        centres = (np.arange(grid) + 0.5) / grid * bands.n  # token position at each relative cell's centre
        which = np.searchsorted(doc.edges, centres, side="right") - 1  # (grid,) document block holding it
        resampled = doc.cells[:, :, which][:, :, :, which]  # (layers, heads, grid, grid)
        if acc is None:
            acc = np.zeros(resampled.shape, dtype=np.float64)
        elif acc.shape != resampled.shape:
            raise PoolingError("The documents come from models with different numbers of layers or heads: "
                               "average the analyses of one model.")
        acc += resampled
        count += 1
        report(progress, count / total if total else 0.0, f"pooled {count}{f'/{total}' if total else ''} documents")
    if count == 0:
        raise PoolingError("Nothing to average: no documents were given; pass at least one analysis's attention.")
    return PooledAttention((acc / count).astype(np.float32), np.linspace(0.0, 1.0, grid + 1), count, relative=True)


def normalised_maps(pooled: PooledAttention, scale: np.ndarray | None = None) -> np.ndarray:
    """(layers, heads, g, g) in [0, 1]: each head divided by its largest cell; with `scale` (layers, heads),
    e.g. head importance, each head is then multiplied by its weight / the largest weight, so unimportant
    heads fade."""
    cells = pooled.cells.astype(np.float32)
    peak = cells.max(axis=(-2, -1), keepdims=True)
    out = np.divide(cells, peak, out=np.zeros_like(cells), where=peak > 0)
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float64)
        if scale.shape != cells.shape[:2]:
            raise PoolingError(f"scale (e.g. head importance) must have one weight per layer and head, shape "
                               f"{cells.shape[:2]}, got {scale.shape}: compute it for this model.")
        if not np.all(np.isfinite(scale)) or np.any(scale < 0):
            raise PoolingError("scale (e.g. head importance) must be finite and non-negative: normalise it "
                               "(normalise_importance) or take its absolute value.")
        top = scale.max()
        out *= (scale / top if top > 0 else scale)[:, :, None, None].astype(np.float32)
    return out


def block_tokens(pooled: PooledAttention, cell: int) -> tuple[int, int]:
    """Token range [start, stop) of a document block (for labels and selections)."""
    if pooled.relative:
        raise PoolingError("Dataset-wide cells are relative positions (fractions of each document's length), not "
                           "token ranges: ask for token ranges on one document's grid.")
    if not 0 <= cell < pooled.grid:
        raise SelectionError(f"Cell {cell} is out of range: this grid has cells 0..{pooled.grid - 1}.")
    return int(pooled.edges[cell]), int(pooled.edges[cell + 1])


# ---------------------------------------------------------------------------------------------- workers
def _bands_sums(bands: AttentionBands, block: int, g: int, layers: slice = slice(None)) -> np.ndarray:
    return _block_sums(bands.local[layers], bands.global_cols[layers], bands.global_rows[layers],
                       bands.global_idx, bands.window, block, g)


def _block_sums(local, global_cols, global_rows, gidx, w: int, block: int, g: int) -> np.ndarray:
    """(layers, heads, g, g) float64 sums of attention from query block a to key block b, from the bands'
    arrays (AttentionBands.local, .global_cols, .global_rows, .global_idx, .window) of some layers: the band
    part head by head in one compiled pass (`_kernels.block_sums`, no n x n matrix), then the global rows and
    columns."""
    L, H, n, width = local.shape
    sums = np.empty((L, H, g, g), dtype=np.float64)
    for layer in range(L):
        for head in range(H):
            _kernels.block_sums(np.ascontiguousarray(local[layer, head], dtype=np.float32), w, block,
                                sums[layer, head])
    if len(gidx):
        gblock = gidx // block
        gcols = global_cols.astype(np.float64)  # (layers, heads, n, globals): small
        gcols[:, :, gidx, :] = 0.0  # a global query's row is global_rows alone
        starts = np.arange(g) * block
        col_sums = np.add.reduceat(gcols, starts, axis=2)  # (layers, heads, g, globals)
        row_sums = np.add.reduceat(global_rows.astype(np.float64), starts, axis=3)  # (L, H, globals, g)
        for p, blk in enumerate(gblock):
            sums[:, :, :, blk] += col_sums[:, :, :, p]
            sums[:, :, blk, :] += row_sums[:, :, p, :]
    return sums


def check_grid(grid) -> int:
    """The pooled maps' cells per axis as an int in 1..1024, else PoolingError."""
    return whole_number(grid, f"grid (cells per axis, e.g. {DEFAULT_GRID})", 1, 1024, error=PoolingError)
