"""Pooled per-head maps: each cell is the block mean of the head's dense matrix; dataset-wide averages."""
from __future__ import annotations

import numpy as np
import pytest

from longviz_core import analyze
from longviz_core.views.pooling import (
    block_tokens,
    normalised_maps,
    pool_attention,
    pool_dataset,
)
from support.oracles import assert_cells_are_block_means, synthetic_bands
from tiny import text_of


@pytest.mark.parametrize("grid", [8, 13, 64])
def test_cells_are_block_means_on_a_model(tiny_longformer, grid):
    doc = analyze(tiny_longformer, text_of(90), max_tokens=100)
    pooled = pool_attention(doc.attention, grid)
    assert_cells_are_block_means(doc.attention, pooled)
    block = -(-doc.n // grid)
    assert pooled.grid == -(-doc.n // block)
    assert pooled.edges[0] == 0 and pooled.edges[-1] == doc.n
    # rows of a dense head sum to 1, so a query block's cells, weighted by key-block sizes, average to 1/n...
    sizes = np.diff(pooled.edges)
    np.testing.assert_allclose((pooled.cells * sizes).sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("n,w,gidx,grid", [(120, 30, (0, 41), 16), (121, 30, (0, 119), 7), (50, 40, (3,), 64),
                                           (90, 10, (), 9)])
def test_cells_are_block_means_with_several_global_tokens(n, w, gidx, grid):
    bands = synthetic_bands(n=n, w=w, gidx=gidx, levels=50)
    assert_cells_are_block_means(bands, pool_attention(bands, grid))


def test_full_attention_model(tiny_bert):
    doc = analyze(tiny_bert, text_of(40), max_tokens=50)
    assert_cells_are_block_means(doc.attention, pool_attention(doc.attention, 10))


def test_normalised_maps_and_importance_scale():
    pooled = pool_attention(synthetic_bands(levels=50), 12)
    maps = normalised_maps(pooled)
    np.testing.assert_allclose(maps.max(axis=(-2, -1)), 1.0)
    np.testing.assert_allclose(maps * pooled.cells.max(axis=(-2, -1), keepdims=True), pooled.cells, rtol=1e-6)
    scale = np.array([[1.0, 0.5], [0.25, 2.0]])
    scaled = normalised_maps(pooled, scale)
    np.testing.assert_allclose(scaled.max(axis=(-2, -1)), scale / 2.0, rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        normalised_maps(pooled, np.ones((3, 2)))
    with pytest.raises(ValueError, match="non-negative"):
        normalised_maps(pooled, -scale)


def test_dataset_average_on_relative_cells():
    # lengths that are multiples of the grid: a relative cell is exactly a document block
    a, b = synthetic_bands(n=64, w=10, gidx=(0,), levels=50, seed=1), synthetic_bands(n=128, w=10, gidx=(0,), seed=2)
    avg = pool_dataset(iter([a, b]), grid=8)
    expected = (pool_attention(a, 8).cells + pool_attention(b, 8).cells) / 2
    np.testing.assert_allclose(avg.cells, expected, rtol=1e-6)
    assert avg.relative and avg.n_documents == 2 and avg.grid == 8
    np.testing.assert_allclose(avg.edges, np.linspace(0, 1, 9))


def test_dataset_cells_take_the_block_holding_their_centre():
    short = synthetic_bands(n=5, w=2, gidx=(0,), levels=50)  # fewer tokens than cells: each token spans cells
    avg = pool_dataset([short], grid=10, total=1, progress=lambda f, m: None)
    doc = pool_attention(short, 10)  # 5 one-token blocks
    which = (np.arange(10) + 0.5) / 10 * 5
    idx = np.floor(which).astype(int)
    np.testing.assert_allclose(avg.cells, doc.cells[:, :, idx][:, :, :, idx], rtol=1e-6)


def test_block_tokens_and_validation():
    pooled = pool_attention(synthetic_bands(n=100, w=10, gidx=(0,)), 8)  # block 13
    assert block_tokens(pooled, 0) == (0, 13)
    assert block_tokens(pooled, pooled.grid - 1) == (91, 100)
    with pytest.raises(ValueError):
        block_tokens(pooled, pooled.grid)
    with pytest.raises(ValueError, match="grid"):
        pool_attention(synthetic_bands(), 0)
    with pytest.raises(ValueError, match="no documents"):
        pool_dataset([], 8)
    with pytest.raises(ValueError, match="relative"):
        block_tokens(pool_dataset([synthetic_bands()], 8), 0)
