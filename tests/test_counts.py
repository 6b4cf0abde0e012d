"""Top-k attended / attending lists and their counts against a brute-force Algorithms 1-3 on dense matrices."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from longviz_core import analyze
from longviz_core.bands import AttentionBands
from longviz_core.views.counts import (
    TopK,
    count_intersection,
    instance_counts,
    position_counts,
    tally,
    token_counts,
    topk_indices,
)
from longviz_core.views.masking import normalise_tokens
from tiny import make_tiny_longformer, text_of


# ------------------------------------------------------------------------------------------ brute force
def brute_topk(matrix: np.ndarray, k: int) -> list[list[int]]:
    """Algorithm 1 on one dense head: per row, the k positive entries with the largest values, ties to the
    lower position (Python's stable sort on (-value, position))."""
    out = []
    for row in matrix:
        ranked = sorted((j for j in range(len(row)) if row[j] > 0), key=lambda j: (-row[j], j))
        out.append(ranked[:k])
    return out


def brute_lists(bands: AttentionBands, k: int, direction: str) -> dict:
    """{(layer, head): lists} for every head; Algorithm 3 = Algorithm 1 on the transposed matrix."""
    lists = {}
    for layer in range(bands.num_layers):
        for head in range(bands.num_heads):
            dense = bands.dense(layer, head)
            lists[layer, head] = brute_topk(dense if direction == "attended" else dense.T, k)
    return lists


def brute_counts(lists: dict, labels: list[str], by: str, scope, mask=None) -> Counter:
    """Algorithm 2: per owning token and head, the set of listed types (or positions); count appearances."""
    counts = Counter()
    for (layer, head), per_token in lists.items():
        if (layer, head) not in scope:
            continue
        for owner, listed in enumerate(per_token):
            if mask is not None and mask[owner]:
                continue
            kept = [j for j in listed if mask is None or not mask[j]]
            counts.update(set(kept) if by == "position" else {labels[j] for j in kept})
    return counts


def labels_of(tokens) -> list[str]:
    norm = normalise_tokens(tokens)
    # tokens that normalise to nothing keep a visible stand-in; the tiny corpus has none but <s>/</s> map to
    # themselves, so the normalised form is the type label here
    assert all(norm)
    return norm


def frame_as_counter(frame: pd.DataFrame, by: str) -> Counter:
    key = "position" if by == "position" else "token"
    return Counter(dict(zip(frame[key], frame["count"])))


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    """Window 64 (w = 32): wide enough for the two-stage chunked selection; peaked attention (init 0.5)."""
    from longviz_core import load_model

    path = make_tiny_longformer(tmp_path_factory.mktemp("wide"), layers=2, heads=2, window=64,
                                initializer_range=0.5, max_positions=260)
    return load_model(str(path))


@pytest.fixture(scope="module")
def analysis(wide_model):
    return analyze(wide_model, text_of(150), max_tokens=140)


def synthetic_bands(n=120, w=30, gidx=(0, 41), levels=3, seed=0, layers=2, heads=2) -> AttentionBands:
    """Random bands quantised to a few levels, so ties are everywhere; Longformer's zero conventions kept
    (outside the document, band columns at global keys, band rows and global columns of global queries)."""
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
    return AttentionBands(local, gcols, grows, gidx, w)


# ------------------------------------------------------------------------------------------ top-k lists
def _assert_lists_equal(topk: TopK, bands: AttentionBands, k: int):
    for direction in ("attended", "attending"):
        ref = brute_lists(bands, k, direction)
        got = topk.lists(direction)
        for (layer, head), per_token in ref.items():
            for i, listed in enumerate(per_token):
                expected = listed + [-1] * (k - len(listed))
                assert got[layer, head, i, :k].tolist() == expected, (direction, layer, head, i)


@pytest.mark.parametrize("k", [1, 3, 12])
def test_topk_lists_equal_brute_force_on_a_model(analysis, k):
    bands = analysis.attention
    assert bands.window == 32
    _assert_lists_equal(topk_indices(bands, k=k), bands, k)


@pytest.mark.parametrize("seed,gidx,k,levels", [(0, (0, 41), 5, 3), (1, (0,), 20, 3), (2, (), 4, 3),
                                                (3, (7, 8, 119), 6, 3), (4, (0,), 7, 1)])
def test_topk_lists_break_ties_by_lower_position(seed, gidx, k, levels):
    bands = synthetic_bands(gidx=gidx, seed=seed, levels=levels)  # levels=1: every entry ties
    _assert_lists_equal(topk_indices(bands, k=k), bands, k)


def test_all_zero_attention_gives_empty_lists():
    bands = synthetic_bands(n=30, w=5, gidx=(0,))
    zero = AttentionBands(np.zeros_like(bands.local), np.zeros_like(bands.global_cols),
                          np.zeros_like(bands.global_rows), bands.global_idx, bands.window)
    topk = topk_indices(zero, k=3)
    assert np.all(topk.attended == -1) and np.all(topk.attending == -1)


def test_prefix_of_a_longer_list_is_the_shorter_list(analysis):
    long, short = topk_indices(analysis.attention, k=10), topk_indices(analysis.attention, k=4)
    assert np.array_equal(long.attended[..., :4], short.attended)
    assert np.array_equal(long.attending[..., :4], short.attending)


def test_rows_with_fewer_than_k_entries_are_padded(wide_model):
    doc = analyze(wide_model, "the model", max_tokens=16)  # n = 4 tokens
    topk = topk_indices(doc.attention, k=10)
    assert topk.attended.shape == (2, 2, doc.n, 10)
    assert np.all(topk.attended[..., doc.n :] == -1)
    assert np.all(np.sort(topk.attended[..., : doc.n], axis=-1) == np.arange(doc.n))  # every key once


def test_full_attention_model(tiny_bert):
    doc = analyze(tiny_bert, text_of(30), max_tokens=40)
    _assert_lists_equal(topk_indices(doc.attention, k=5), doc.attention, 5)


# ------------------------------------------------------------------------------------------ counts
SCOPES = {
    "one head": ([1], [0]),
    "one layer": ([0], None),
    "all": (None, None),
    "two heads across layers": ([0, 1], [1]),
}


@pytest.mark.parametrize("scope", list(SCOPES))
@pytest.mark.parametrize("direction", ["attended", "attending"])
@pytest.mark.parametrize("by", ["type", "position"])
def test_counts_equal_brute_force(analysis, scope, direction, by):
    k = 5
    layers, heads = SCOPES[scope]
    topk = topk_indices(analysis.attention, k=8)  # counts use the first k entries of longer lists
    labels = labels_of(analysis.tokens)
    in_scope = {(l, h) for l in (layers or range(2)) for h in (heads or range(2))}
    lists = brute_lists(analysis.attention, k, direction)
    expected = brute_counts(lists, labels, by, in_scope)
    frame = token_counts(analysis, k=k, direction=direction, by=by, layers=layers, heads=heads, topk=topk)
    assert frame_as_counter(frame, by) == expected
    assert (frame["count"] > 0).all()


@pytest.mark.parametrize("by", ["type", "position"])
def test_mask_removes_masked_tokens_from_both_sides(analysis, by):
    k = 4
    rng = np.random.default_rng(5)
    mask = rng.random(analysis.n) < 0.3
    labels = labels_of(analysis.tokens)
    lists = brute_lists(analysis.attention, k, "attending")
    expected = brute_counts(lists, labels, by, {(l, h) for l in range(2) for h in range(2)}, mask=mask)
    frame = token_counts(analysis, k=k, direction="attending", by=by, mask=mask)
    assert frame_as_counter(frame, by) == expected
    if by == "position":
        assert not mask[frame["position"]].any()
    unmasked = token_counts(analysis, k=k, direction="attending", by=by)
    assert not frame.equals(unmasked)


def test_table_order_count_descending_ties_by_position(analysis):
    frame = token_counts(analysis, k=3, by="position")
    keys = list(zip(-frame["count"], frame["position"]))
    assert keys == sorted(keys)
    types = token_counts(analysis, k=3, by="type")
    labels = labels_of(analysis.tokens)
    first = {t: labels.index(t) for t in types["token"]}
    keys = [(-c, first[t]) for t, c in zip(types["token"], types["count"])]
    assert keys == sorted(keys)
    assert list(frame.columns) == ["position", "token", "count"]
    assert list(types.columns) == ["token", "count"]


def test_a_type_counts_once_per_list_even_with_two_instances():
    # one head, 4 tokens; query 3 attends to keys 0 and 1 which share a type
    n, w = 4, 3
    local = np.zeros((1, 1, n, 2 * w + 1), dtype=np.float32)
    for i in range(n):
        for j in range(n):
            local[0, 0, i, j - i + w] = [0.4, 0.4, 0.1, 0.1][j]
    bands = AttentionBands(local, np.zeros((1, 1, n, 0), np.float32), np.zeros((1, 1, 0, n), np.float32),
                           np.zeros(0, np.int64), w)

    class Doc:
        tokens = ["Ġcat", "Ġcat", "Ġsat", "Ġmat"]
        attention = bands

    by_type = token_counts(Doc, k=2, by="type")
    assert dict(zip(by_type["token"], by_type["count"])) == {"cat": 4}  # 4 queries, each counts 'cat' once
    by_pos = token_counts(Doc, k=2, by="position")
    assert dict(zip(by_pos["position"], by_pos["count"])) == {0: 4, 1: 4}


def test_intersection_and_instances_match_brute_force(analysis):
    k, top_n = 5, 8
    topk = topk_indices(analysis.attention, k=k)
    for by in ("type", "position"):
        a = token_counts(analysis, k=k, direction="attended", by=by, topk=topk)
        b = token_counts(analysis, k=k, direction="attending", by=by, topk=topk)
        both = count_intersection(a, b, top_n=top_n)
        key = "position" if by == "position" else "token"
        assert set(both[key]) == set(a[key].head(top_n)) & set(b[key].head(top_n))
        for _, row in both.iterrows():
            assert row["count_attended"] == a.set_index(key).loc[row[key], "count"]
            assert row["count_attending"] == b.set_index(key).loc[row[key], "count"]
    labels = labels_of(analysis.tokens)
    word = "model"
    inst = instance_counts(analysis, word, k=k, direction="attending", topk=topk)
    assert inst["position"].tolist() == [i for i, t in enumerate(labels) if t == word]
    counts = position_counts(tally(topk, analysis.tokens), k, "attending")
    assert inst["count"].tolist() == counts[inst["position"]].tolist()
    with pytest.raises(ValueError, match="does not occur"):
        instance_counts(analysis, "zebra", topk=topk)


def test_tallies_serve_every_scope_and_k_and_check_their_mask(analysis):
    topk = topk_indices(analysis.attention, k=6)
    mask = np.random.default_rng(1).random(analysis.n) < 0.25
    tallies = tally(topk, analysis.tokens, mask)
    assert tallies.k == 6 and tallies.positions.shape == (2, 2, 2, 6, analysis.n)
    for k in (1, 4, 6):
        for layers, heads in SCOPES.values():
            for direction in ("attended", "attending"):
                for by in ("type", "position"):
                    fast = token_counts(analysis, k, direction, by, layers, heads, mask, tallies=tallies)
                    labels = labels_of(analysis.tokens)
                    in_scope = {(l, h) for l in (layers or range(2)) for h in (heads or range(2))}
                    expected = brute_counts(brute_lists(analysis.attention, k, direction), labels, by, in_scope, mask)
                    assert frame_as_counter(fast, by) == expected
    with pytest.raises(ValueError, match="another mask"):
        token_counts(analysis, 2, mask=None, tallies=tallies)
    with pytest.raises(ValueError, match="another mask"):
        token_counts(analysis, 2, mask=~mask, tallies=tallies)


def test_invalid_inputs(analysis):
    topk = topk_indices(analysis.attention, k=3)
    with pytest.raises(ValueError, match="k must be"):
        topk_indices(analysis.attention, k=0)
    with pytest.raises(ValueError, match="exceeds"):
        token_counts(analysis, k=5, topk=topk)
    with pytest.raises(ValueError, match="mask"):
        token_counts(analysis, k=2, topk=topk, mask=np.zeros(3, bool))
    with pytest.raises(ValueError, match="direction"):
        token_counts(analysis, k=2, topk=topk, direction="sideways")
    with pytest.raises(ValueError, match="by must"):
        token_counts(analysis, k=2, topk=topk, by="colour")
    with pytest.raises(ValueError, match="layer index"):
        token_counts(analysis, k=2, topk=topk, layers=[5])
    with pytest.raises(ValueError):
        topk_indices(np.zeros((2, 2)))


def test_one_or_two_workers_give_the_same_lists_and_report_progress(analysis):
    seen = []
    one = topk_indices(analysis.attention, k=6, workers=1)
    two = topk_indices(analysis.attention, k=6, workers=2, progress=lambda f, m: seen.append(f))
    assert np.array_equal(one.attended, two.attended) and np.array_equal(one.attending, two.attending)
    assert seen == [1 / 4, 2 / 4, 3 / 4, 1.0]
    assert not one.attended.flags.writeable


def test_compiled_loops_cache_under_the_longviz_cache_folder(tmp_path):
    """numba's default cache (next to the source, else the home folder) may be read-only on a lab server;
    the compiled loops cache under $LONGVIZ_CACHE_DIR/numba instead, and a second process loads them from there
    instead of compiling them again."""
    script = (
        "import numpy as np\n"
        "from longviz_core import _kernels\n"
        "from tests.test_counts import synthetic_bands\n"
        "from longviz_core.views.counts import topk_indices\n"
        "topk_indices(synthetic_bands(n=40, w=6, gidx=(0,)), k=3)\n"
        "print(sum(map(len, (_kernels.collect.stats.cache_hits, _kernels.collect_keys.stats.cache_hits))))\n"
    )
    env = {**os.environ, "LONGVIZ_CACHE_DIR": str(tmp_path)}
    env.pop("NUMBA_CACHE_DIR", None)
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "tests")])

    def hits() -> int:
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, check=True, timeout=300,
                              capture_output=True, text=True)
        return int(done.stdout.split()[-1])

    assert hits() == 0  # compiled, and saved
    assert {p.suffix for p in (tmp_path / "numba").rglob("*") if p.is_file()} >= {".nbi", ".nbc"}
    assert hits() == 2  # both loaded from the cache
