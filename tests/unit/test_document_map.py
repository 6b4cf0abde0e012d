"""The document map (views.document_map) and its strip (figures.document_map) on an 8,192-token document of a
real tokenizer's sentences and paragraphs with synthetic scores (no model): passage sums, densities, shares,
ranks, top passages and the passage of every token against a plain loop; the strip's marks carry those values."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import longviz_core as lv
from longviz_core.figures.document_map import document_map_chart
from longviz_core.model.encoding import encode
from longviz_core.views.document_map import LABEL_CHARS, document_map
from tiny import WORDS

N = 8192


@pytest.fixture(scope="module")
def doc(tiny_longformer_dir):
    """8,192 tokens of sentences of 3 to 40 words, a blank line every few sentences, cut at the end mid-sentence."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_longformer_dir))
    rng = np.random.default_rng(0)
    words = [w for w in WORDS if w not in ".,;"]
    parts = []
    while len(parts) < 3000:
        sentence = " ".join(rng.choice(words, rng.integers(3, 40)))
        parts.append(sentence[0].upper() + sentence[1:] + (".\n\n" if rng.random() < 0.2 else ". "))
    text = "".join(parts)
    enc = encode(tokenizer, text, N)
    assert enc.n == N  # truncated to the map's size
    return SimpleNamespace(text=text, encoded=enc, tokens=enc.tokens, n=enc.n)


def _loop(scores, spans, mask, rank_by, k):
    """The map's numbers one passage at a time."""
    sums = []
    for a, b in spans:
        sums.append(sum(float(scores[p]) for p in range(a, b) if mask is None or not mask[p]))
    total = sum(abs(s) for s in sums)
    key = (lambda u: (-sums[u], u)) if rank_by == "signed" else (lambda u: (-abs(sums[u]), u))
    order = sorted(range(len(sums)), key=key)
    rank = {u: r + 1 for r, u in enumerate(order)}
    keep = (lambda s: s > 0) if rank_by == "signed" else (lambda s: s != 0)
    top = [u for u in order if keep(sums[u])][:k]
    return sums, [s / (b - a) for s, (a, b) in zip(sums, spans)], [s / total for s in sums], rank, top


@pytest.mark.parametrize("unit", ["sentence", "paragraph"])
@pytest.mark.parametrize("rank_by", ["signed", "magnitude"])
@pytest.mark.parametrize("masked", [False, True])
def test_the_map_against_a_loop(doc, unit, rank_by, masked):
    seg = lv.segment(doc, unit)
    assert len(seg) > (150 if unit == "sentence" else 30)  # a few hundred sentences: the map's scale
    rng = np.random.default_rng(1)
    scores = rng.normal(size=N) * rng.random(N) ** 4  # (n,) a few large, mostly small, both signs
    scores[[0, N - 1]] = 50.0  # <s> and </s>: in no passage
    mask = rng.random(N) < 0.3 if masked else None
    if masked:
        scores[mask & (rng.random(N) < 0.5)] = np.nan  # a masked token's score is never read
    k = 7
    dmap = document_map(scores, seg, mask, rank_by=rank_by, k=k)
    sums, density, share, rank, top = _loop(scores, seg.spans, mask, rank_by, k)
    assert len(dmap) == len(seg) and dmap.n == N and dmap.unit == unit
    assert [(int(a), int(b)) for a, b in zip(dmap.starts, dmap.stops)] == list(seg.spans)
    np.testing.assert_allclose(dmap.scores, sums, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dmap.density, density, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dmap.share, share, rtol=1e-12, atol=1e-12)
    assert dmap.rank.tolist() == [rank[u] for u in range(len(seg))]
    assert dmap.top.tolist() == top and len(top) == k
    table = dmap.table()
    assert table["position"].tolist() == [seg.spans[u][0] for u in top]
    assert table["rank"].tolist() == [rank[u] for u in top]
    np.testing.assert_allclose(table["score"], [sums[u] for u in top], rtol=1e-12)
    assert all(len(t) <= LABEL_CHARS and "\n" not in t for t in table[unit])
    assert table[unit].iloc[0].replace("…", "") in " ".join(seg.texts[top[0]].split())


def test_every_token_finds_its_passage(doc):
    seg = lv.segment(doc, "sentence")
    dmap = document_map(np.ones(N), seg)
    found = [dmap.passage_of(p) for p in range(-1, N + 1)]
    assert found == [None, None, *[next(u for u, (a, b) in enumerate(seg.spans) if a <= p < b)
                                   for p in range(1, N - 1)], None, None]


def test_attention_scores_rank_high_to_low_and_only_positive_ones_top():
    seg = lv.model.segments.Segments("sentence", ((1, 3), (3, 4), (4, 7)), ("a b", "c", "d e f"), 8)
    scores = np.array([9.0, -1.0, 0.5, -2.0, 1.0, 1.0, 1.0, 9.0])
    dmap = document_map(scores, seg, k=5)
    assert dmap.scores.tolist() == [-0.5, -2.0, 3.0] and dmap.rank.tolist() == [2, 3, 1]
    assert dmap.top.tolist() == [2]  # the negative passages are not "top": the strip shows them red
    assert document_map(scores, seg, rank_by="magnitude").top.tolist() == [2, 1, 0]
    assert document_map(np.zeros(8), seg).share.tolist() == [0.0, 0.0, 0.0]  # and no division by 0
    assert document_map(np.zeros(8), seg).top.tolist() == []


def test_bad_input_is_a_settings_error(doc):
    seg = lv.segment(doc, "sentence")
    for bad, match in [(dict(rank_by="abs"), "rank_by"), (dict(k=-1), "k "), (dict(mask=np.zeros(3, bool)), "mask"),
                       (dict(scores=np.ones(5)), "tokens")]:
        with pytest.raises(lv.SettingsError, match=match):
            document_map(**{"scores": np.ones(N), "segments": seg, **bad})
    nan = np.ones(N)
    nan[5] = np.nan
    with pytest.raises(lv.SettingsError):  # an unmasked NaN is no score
        document_map(nan, seg)
    with pytest.raises(lv.SettingsError, match="Segments"):
        document_map(np.ones(N), seg.spans)


def _layers(chart):
    spec = chart.to_dict()
    return spec, [(layer, spec["datasets"][layer["data"]["name"]]) for layer in spec["layer"]]


@pytest.mark.parametrize("mode", ["diverging", "sequential"])
def test_the_strip_carries_the_maps_values(doc, mode):
    seg = lv.segment(doc, "sentence")
    scores = np.random.default_rng(2).normal(size=N)
    if mode == "sequential":
        scores = np.abs(scores)  # received attention
    dmap = document_map(scores, seg)
    chosen = int(dmap.top[2])
    spec, ((strip, rows), (_, top), (ranks, labels), (_, picked)) = _layers(
        document_map_chart(dmap, mode, selected=chosen))
    assert [r["start"] for r in rows] == dmap.starts.tolist() and [r["stop"] for r in rows] == dmap.stops.tolist()
    np.testing.assert_allclose([r["density"] for r in rows], dmap.density)
    np.testing.assert_allclose([r["score"] for r in rows], dmap.scores)
    assert strip["mark"]["type"] == "rect" and strip["encoding"]["color"]["field"] == "density"
    assert strip["encoding"]["x"]["field"] == "start" and strip["encoding"]["x2"]["field"] == "stop"
    assert strip["encoding"]["x"]["scale"]["domain"] == [0, N]
    vmax = np.abs(dmap.density).max()
    colours = strip["encoding"]["color"]["scale"]
    assert colours["domain"] == ([-vmax, 0, vmax] if mode == "diverging" else [0, vmax])
    assert sorted(r["start"] for r in top) == sorted(dmap.starts[dmap.top].tolist())  # a bar per top passage
    assert sorted((r["rank"], r["middle"]) for r in labels) == [  # each top passage's rank over its middle
        (i + 1, (dmap.starts[u] + dmap.stops[u]) / 2) for i, u in enumerate(dmap.top)]
    assert ranks["encoding"]["text"]["field"] == "rank" and ranks["mark"]["type"] == "text"
    assert [(r["start"], r["stop"]) for r in picked] == [(dmap.starts[chosen], dmap.stops[chosen])]
    assert spec["height"] == 72 and "Document map" in spec["title"]["text"]
    assert len(rows) > 150  # a few hundred passages in one strip
    (param,) = spec["params"]  # a click on the strip selects a passage by its first token
    assert param["name"] == "passage" and param["select"]["fields"] == ["start"] and param["views"] == [strip["name"]]


def test_the_strip_rejects_an_unknown_mode(doc):
    with pytest.raises(ValueError, match="mode"):
        document_map_chart(document_map(np.ones(N), lv.segment(doc, "sentence")), "rainbow")
