"""Independent oracles shared by several test modules: brute-force top-k, synthetic tie-heavy bands, the dense
recomputation of Longformer and BERT attention from the layer weights, pooled-cell and store comparisons."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from longviz_core.dataset.store import ResultStore
from longviz_core.model.bands import AttentionBands


def hidden_states(model, analysis):
    inputs = analysis.encoded.torch_inputs(model.device)
    if model.family.name != "longformer":
        inputs.pop("global_attention_mask")
    with torch.no_grad():
        out = model.model(**inputs, output_hidden_states=True)
    return [h[0].double() for h in out.hidden_states]  # entering layer l: hidden_states[l]


def block_means(dense: np.ndarray, edges: np.ndarray) -> np.ndarray:
    e = edges.astype(int)
    g = len(e) - 1
    return np.array([[dense[e[a] : e[a + 1], e[b] : e[b + 1]].mean() for b in range(g)] for a in range(g)])


# ------------------------------------------------------------------------------------------ brute force
def brute_topk(matrix: np.ndarray, k: int) -> list[list[int]]:
    """Algorithm 1 on one dense head: per row, the k positive entries with the largest values, ties to the
    lower position (Python's stable sort on (-value, position))."""
    out = []
    for row in matrix:
        ranked = sorted((j for j in range(len(row)) if row[j] > 0), key=lambda j: (-row[j], j))
        out.append(ranked[:k])
    return out


def synthetic_bands(n=120, w=30, gidx=(0, 41), levels=3, seed=0, layers=2, heads=2, narrow=None) -> AttentionBands:
    """Random bands quantised to a few levels, so ties are everywhere; Longformer's zero conventions kept
    (outside the document, band columns at global keys, band rows and global columns of global queries).
    `narrow` {layer: w'}: that layer's band is zero beyond w' < w, as a layer with a narrower window padded to
    the widest one."""
    rng = np.random.default_rng(seed)
    gidx = np.asarray(gidx, dtype=np.int64)
    width = 2 * w + 1
    local = np.ceil(rng.random((layers, heads, n, width)) * levels).astype(np.float32) / levels
    gcols = np.ceil(rng.random((layers, heads, n, len(gidx))) * levels).astype(np.float32) / levels
    grows = np.ceil(rng.random((layers, heads, len(gidx), n)) * levels).astype(np.float32) / levels
    keys = np.arange(n)[:, None] - w + np.arange(width)[None, :]
    local[:, :, (keys < 0) | (keys >= n) | np.isin(keys, gidx)] = 0.0
    local[:, :, gidx] = 0.0
    gcols[:, :, gidx] = 0.0
    for layer, w_layer in (narrow or {}).items():
        local[layer, :, :, np.abs(np.arange(width) - w) > w_layer] = 0.0
    return AttentionBands(local, gcols, grows, gidx, w)


@torch.no_grad()
def oracle_longformer(model, analysis, layer):
    """Dense (heads, n, n) attention of one Longformer layer, from its weights."""
    att = model.model.longformer.encoder.layer[layer].attention.self
    x = hidden_states(model, analysis)[layer]
    n, H = x.shape[0], att.num_heads
    d = att.head_dim
    w = att.one_sided_attn_window_size
    lin = lambda m: (x @ m.weight.double().T + m.bias.double()).view(n, H, d).transpose(0, 1)  # noqa: E731
    q, k, qg, kg = lin(att.query), lin(att.key), lin(att.query_global), lin(att.key_global)
    glob = torch.as_tensor(analysis.encoded.global_mask.astype(bool))
    i = torch.arange(n)
    allowed = ((i[:, None] - i[None, :]).abs() <= w) | glob[None, :]  # band + global keys
    scores = torch.where(allowed, q @ k.transpose(1, 2) / d**0.5, torch.tensor(float("-inf"), dtype=torch.double))
    dense = torch.softmax(scores, dim=-1)
    g_scores = qg @ kg.transpose(1, 2) / d**0.5  # global queries see every key
    dense[:, glob] = torch.softmax(g_scores, dim=-1)[:, glob]
    return dense.detach().numpy()


@torch.no_grad()
def oracle_bert(model, analysis, layer):
    """Dense (heads, n, n) attention of one BERT layer, from its weights."""
    att = model.model.bert.encoder.layer[layer].attention.self
    x = hidden_states(model, analysis)[layer]
    n = x.shape[0]
    H, d = att.num_attention_heads, att.attention_head_size
    lin = lambda m: (x @ m.weight.double().T + m.bias.double()).view(n, H, d).transpose(0, 1)  # noqa: E731
    q, k = lin(att.query), lin(att.key)
    return torch.softmax(q @ k.transpose(1, 2) / d**0.5, dim=-1).detach().numpy()


def assert_cells_are_block_means(bands, pooled):
    for layer in range(bands.num_layers):
        for head in range(bands.num_heads):
            expected = block_means(bands.dense(layer, head), pooled.edges)
            np.testing.assert_allclose(pooled.cells[layer, head], expected, rtol=1e-5, atol=1e-8)


def assert_stores_equal(a, b, rtol=1e-6, atol=1e-9) -> None:
    """Two stores hold the same units (files and index) and give the same dataset-wide numbers."""
    sa, sb = ResultStore(a), ResultStore(b)
    kinds = sa.manifest["kinds"]
    assert kinds == sb.manifest["kinds"]
    for kind in kinds:
        if kind == "head-importance":
            np.testing.assert_allclose(sa.head_importance(), sb.head_importance(), rtol=rtol)
            continue
        assert sa.doc_ids(kind) == sb.doc_ids(kind) and sa.doc_ids(kind), kind
        names = set()
        for doc_id in sa.doc_ids(kind):
            ra, rb = sa.load(doc_id, kind), sb.load(doc_id, kind)
            assert ra.arrays.keys() == rb.arrays.keys() and ra.tables.keys() == rb.tables.keys()
            for name in ra.arrays:
                np.testing.assert_allclose(ra.arrays[name], rb.arrays[name], rtol=rtol, atol=atol)
            for name in ra.tables:
                pd.testing.assert_frame_equal(_numbers(kind, ra.tables[name]), _numbers(kind, rb.tables[name]),
                                              rtol=rtol, atol=atol)
            names |= set(ra.tables)
        for name in names:  # the SQLite indexes agree too
            pd.testing.assert_frame_equal(_numbers(kind, sa.table(kind, name)), _numbers(kind, sb.table(kind, name)),
                                          rtol=rtol, atol=atol)
    if "attention" in kinds:
        np.testing.assert_allclose(sa.pooled_attention().cells, sb.pooled_attention().cells, rtol=rtol)
    if "attribution" in kinds:
        pd.testing.assert_frame_equal(sa.attribution_by_token_type(), sb.attribution_by_token_type(), rtol=rtol)
    if "agreement" in kinds:
        pd.testing.assert_frame_equal(sa.dataset_agreement().table, sb.dataset_agreement().table, rtol=rtol, atol=atol)
    if "faithfulness" in kinds:
        pd.testing.assert_frame_equal(sa.dataset_faithfulness().summary, sb.dataset_faithfulness().summary,
                                      rtol=rtol, atol=atol)
    if "leaderboard" in kinds:
        pd.testing.assert_frame_equal(_numbers("leaderboard", sa.leaderboard_runs()),
                                      _numbers("leaderboard", sb.leaderboard_runs()), rtol=rtol, atol=atol)
    assert not sa.verify() and not sb.verify()


def _numbers(kind: str, table: pd.DataFrame) -> pd.DataFrame:
    """A stored table without what is measured rather than computed: the leaderboard's cost columns (wall time and
    peak memory differ from run to run)."""
    return table.drop(columns=["seconds", "peak_bytes", "deletion_seconds"]) if kind == "leaderboard" else table



# ------------------------------------------------------------------------------------------ words
def encoding_words(tokenizer, text: str) -> tuple[list[str], list[int], list[str]]:
    """The fast tokenizer's own word numbering of `text` with its special tokens, as the model sees it:
    (tokens, word id per token with -1 for a special token (word_ids() None), each word's text taken from the
    original `text` by the tokens' character offsets, stripped and lower-cased)."""
    enc = tokenizer(text, return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    ids = [-1 if w is None else w for w in enc.word_ids()]
    spans: dict[int, list[int]] = {}
    for w, (start, stop) in zip(ids, enc["offset_mapping"]):
        if w >= 0:
            spans.setdefault(w, [start, stop])
            spans[w] = [min(spans[w][0], start), max(spans[w][1], stop)]
    texts = [text[spans[w][0]:spans[w][1]].strip().lower() for w in sorted(spans)]
    return tokens, ids, texts
