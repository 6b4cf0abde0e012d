"""Token overlay HTML: escaping, colours by sign and magnitude, readable BPE text, masks, legend, the attribution
header (paper Fig 9) with F(x) − F(baseline)."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pytest

from longviz_core.figures.text import (
    attribution_header_html,
    legend_html,
    scale_max,
    token_overlay_html,
)
from longviz_core.tokens import readable_token, token_label
from longviz_core.views.attribution_tables import top_attributions
from longviz_core.views.units import overlay_table, unit_start, units


class _Spans(HTMLParser):
    """Collects each token span (data-pos) with its attributes and text, and the document's visible text."""

    def __init__(self):
        super().__init__()
        self.spans: dict[int, dict] = {}
        self.text: list[str] = []
        self._stack: list[int | None] = []
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "style":
            self.in_style = True
        if tag == "br":
            self.text.append("\n")
            return
        if tag == "span":
            pos = int(a["data-pos"]) if "data-pos" in a else None
            if pos is not None:
                self.spans[pos] = {"attrs": a, "text": ""}
            self._stack.append(pos)

    def handle_endtag(self, tag):
        if tag == "style":
            self.in_style = False
        if tag == "span":
            self._stack.pop()

    def handle_data(self, data):
        if self.in_style:
            return
        self.text.append(data)
        owner = next((p for p in reversed(self._stack) if p is not None), None)
        if owner is not None:
            self.spans[owner]["text"] += data


def _parse(html: str) -> _Spans:
    p = _Spans()
    p.feed(html)
    return p


def _lightness(style: str) -> tuple[int, float] | None:
    m = re.search(r"hsl\((\d+),75%,([\d.]+)%\)", style or "")
    return (int(m.group(1)), float(m.group(2))) if m else None


def test_readable_token_decodes_byte_level_bpe_and_wordpiece():
    assert readable_token("Ġtraining") == " training"
    assert readable_token("Ċ") == "\n"
    assert readable_token("ĊĊ") == "\n\n"
    assert readable_token("Ã©") == "é"  # two byte-level stand-ins for one UTF-8 character
    assert readable_token("##ing") == "ing"
    assert readable_token("▁word") == " word"
    assert readable_token("<s>") == "<s>"
    assert token_label("Ġtraining") == "training"
    assert token_label("Ċ") == "↵"
    assert token_label("Ġ") == "␣"


def test_spans_carry_escaped_text_positions_and_values():
    tokens = ["<s>", "Hello", "Ġ<b>x</b>", "Ġwor", "ld", "</s>"]
    values = [0.0, 0.5, -1.0, 0.25, -0.1, 0.0]
    html = token_overlay_html(tokens, values)
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    p = _parse(html)
    assert sorted(p.spans) == list(range(6))
    assert p.spans[2]["text"] == "<b>x</b>"  # the parser unescapes: the user sees the markup as text
    assert "#3" in p.spans[3]["attrs"]["title"] and "+0.25" in p.spans[3]["attrs"]["title"]
    # readable text: word pieces joined, word-start spaces between boxes, specials as tags
    visible = "".join(p.text)
    assert "Hello <b>x</b> world" in visible
    assert "lv-sp" in p.spans[0]["attrs"]["class"] and "lv-sp" in p.spans[5]["attrs"]["class"]


def test_diverging_colours_follow_sign_and_magnitude():
    values = np.array([0.0, 0.5, -1.0, 0.25, -0.1, 0.0])
    p = _parse(token_overlay_html(["<s>", "a", "Ġb", "Ġc", "Ġd", "</s>"], values))
    hue_l = {i: _lightness(p.spans[i]["attrs"].get("style")) for i in range(6)}
    assert hue_l[0] is None and hue_l[5] is None  # zero -> no background
    assert hue_l[1][0] == 120 and hue_l[3][0] == 120  # positive green
    assert hue_l[2][0] == 0 and hue_l[4][0] == 0  # negative red
    # vmax defaults to max |v| = 1: lightness = 100 - 50 |v|
    for i in (1, 2, 3, 4):
        assert hue_l[i][1] == pytest.approx(100 - 50 * abs(values[i]), abs=0.06)
    # an explicit vmax rescales and saturates beyond it
    p2 = _parse(token_overlay_html(["a", "Ġb"], [0.5, -1.0], vmax=0.5))
    assert _lightness(p2.spans[0]["attrs"]["style"])[1] == pytest.approx(50.0)
    assert _lightness(p2.spans[1]["attrs"]["style"])[1] == pytest.approx(50.0)


def test_sequential_mode_is_white_to_red():
    p = _parse(token_overlay_html(["a", "Ġb", "Ġc"], [0.0, 2.0, 4.0], mode="sequential"))
    assert p.spans[0]["attrs"].get("style") is None
    assert _lightness(p.spans[1]["attrs"]["style"]) == (0, 75.0)
    assert _lightness(p.spans[2]["attrs"]["style"]) == (0, 50.0)


def test_mask_greys_tokens_and_excludes_them_from_vmax():
    # the masked token has the largest value; the scale comes from the unmasked ones
    p = _parse(token_overlay_html(["a", "Ġb", "Ġc"], [10.0, 0.5, -0.25], mask=[True, False, False]))
    assert "lv-m" in p.spans[0]["attrs"]["class"] and p.spans[0]["attrs"].get("style") is None
    assert "masked" in p.spans[0]["attrs"]["title"]
    assert _lightness(p.spans[1]["attrs"]["style"])[1] == pytest.approx(50.0)
    assert _lightness(p.spans[2]["attrs"]["style"])[1] == pytest.approx(75.0)


def test_newline_tokens_break_lines_and_stay_hoverable():
    p = _parse(token_overlay_html(["Ġend", ".Ċ", "Ċ", "Next"], [0.1, 0.2, 0.3, 0.4]))
    visible = "".join(p.text)
    assert " end.\n↵\nNext" in visible
    assert p.spans[2]["text"] == "↵"


def test_title_selection_and_positions_flag():
    html = token_overlay_html(["a", "Ġb"], [0.1, 0.2], title="Doc <1>", selected=1, positions=False)
    assert "Doc &lt;1&gt;" in html
    p = _parse(html)
    assert "lv-sel" in p.spans[1]["attrs"]["class"] and "lv-sel" not in p.spans[0]["attrs"]["class"]
    assert not p.spans[0]["attrs"]["title"].startswith("#")


def test_all_zero_values_and_bad_inputs():
    p = _parse(token_overlay_html(["a", "Ġb"], [0.0, 0.0]))
    assert all(s["attrs"].get("style") is None for s in p.spans.values())
    with pytest.raises(ValueError, match="2 tokens but 3 values"):
        token_overlay_html(["a", "b"], [1, 2, 3])
    with pytest.raises(ValueError, match="mode"):
        token_overlay_html(["a"], [1], mode="rainbow")
    with pytest.raises(ValueError, match="mask"):
        token_overlay_html(["a"], [1], mask=[True, False])


def test_legend_shows_range_and_label():
    lg = legend_html("diverging", vmax=0.3, label="Attribution <x>")
    assert "-0.3" in lg and "+0.3" in lg and "Attribution &lt;x&gt;" in lg
    assert "hsl(120,75%,50%)" in lg and "hsl(0,75%,50%)" in lg
    seq = legend_html("sequential", vmin=0.0, vmax=2.0, label="Attention")
    assert "hsl(120" not in seq and "+2" not in seq and "2" in seq


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.th, self.td, self.note, self._into = [], [], [], None

    def handle_starttag(self, tag, attrs):
        if tag in ("th", "td") or (tag == "div" and ("class", "lv-note") in attrs):
            self._into = {"th": self.th, "td": self.td, "div": self.note}[tag]
            self._into.append("")

    def handle_endtag(self, tag):
        if tag in ("th", "td", "div"):
            self._into = None

    def handle_data(self, data):
        if self._into is not None:
            self._into[-1] += data


def test_attribution_header_shows_captums_columns_and_the_output_difference():
    import torch
    from captum.attr import visualization as viz

    from longviz_core.attribution import Attribution

    raw = np.array([0.0, 0.002, -0.0005, 0.0015, 0.0])
    attr = Attribution(raw=raw, delta=0.0, target=1, n_steps=50, method="gausslegendre", prob_input=0.9996,
                       prob_baseline=0.9966, precision="fp32", internal_batch_size=5, seconds=1.0, key="k",
                       head="single_label")
    summed = torch.tensor(raw)
    word_attributions = summed / torch.norm(summed)  # captum's tutorial summarize_attributions
    record = viz.VisualizationDataRecord(word_attributions, 0.9996, 1, 1, 1, word_attributions.sum(),
                                         ["<s>", "a", "b", "c", "</s>"], attr.delta)
    page = attribution_header_html("AI <paper>", "AI", 0.9996, "AI", attr.total, attr.prob_input, attr.prob_baseline,
                                   attr.weak_explanation)
    cells = _Cells()
    cells.feed(page)
    assert cells.th == ["True label", "Predicted label", "Attribution label", "Attribution score",
                        "F(x) − F(baseline)"]
    # captum's visualize_text prints attr_score with 2 decimals: the sum of the normalised scores
    assert cells.td == ["AI <paper>", "AI (1.00)", "AI", f"{float(record.attr_score):.2f}",
                        "0.9996 − 0.9966 = +0.0030"]
    assert cells.td[3] == "1.18" and "&lt;paper&gt;" in page  # 0.003 / sqrt(6.5e-6) = 1.1767
    assert len(cells.note) == 1 and "p(baseline) = 0.9966" in cells.note[0] and "no flip" in cells.note[0]
    plain = attribution_header_html(None, "other", 0.6, "AI", -0.1, 0.4, 0.2)
    assert "lv-note" not in plain.split("</style>")[1] and ">—<" in plain and "0.4000 − 0.2000 = +0.2000" in plain


# ------------------------------------------------------------------------------------------ unit="word"
WORD_TOKENS = ["<s>", "ĠH", "ell", "o", ",", "Ġwor", "ld", "ĠâĢ", "ľ", "</s>"]  # " Hello", ",", " world", " “"
WORD_VALUES = np.array([5.0, 0.25, 0.25, -0.1, -0.2, 0.5, -1.5, 0.1, 0.1, 0.0])


def test_word_unit_is_one_box_per_word_valued_by_its_pieces_sum():
    p = _parse(token_overlay_html(WORD_TOKENS, WORD_VALUES, unit="word"))
    assert sorted(p.spans) == [0, 1, 4, 5, 7, 9]  # each word at its first token, special tokens their own
    assert [p.spans[i]["text"] for i in (1, 4, 5, 7)] == ["Hello", ",", "world", "“"]
    assert "Hello, world “" in "".join(p.text)
    assert "#1 Hello: +0.4" in p.spans[1]["attrs"]["title"] and "#5 world: -1" in p.spans[5]["attrs"]["title"]
    # the default vmax: the largest |value| of any unmasked unit, here <s>'s 5.0 (pages pass scale_max instead)
    hue_l = {i: _lightness(p.spans[i]["attrs"].get("style")) for i in (1, 4, 5, 7)}
    sums = {1: 0.4, 4: -0.2, 5: -1.0, 7: 0.2}
    for i, total in sums.items():
        assert hue_l[i] == (120 if total > 0 else 0, pytest.approx(100 - 50 * abs(total) / 5.0, abs=0.06))


def test_word_unit_masks_a_word_only_when_all_its_pieces_are():
    mask = np.array([True, True, False, False, True, True, True, False, False, True])
    p = _parse(token_overlay_html(WORD_TOKENS, WORD_VALUES, mask=mask, unit="word"))
    assert "lv-m" not in p.spans[1]["attrs"]["class"]  # 'Hello' keeps two of its pieces
    assert "lv-m" in p.spans[5]["attrs"]["class"] and "(masked)" in p.spans[5]["attrs"]["title"]
    assert "lv-m" in p.spans[4]["attrs"]["class"] and "lv-m" not in p.spans[7]["attrs"]["class"]
    # the automatic scale: the unmasked words, 'Hello' (0.4) and '“' (0.2)
    assert _lightness(p.spans[1]["attrs"]["style"])[1] == pytest.approx(50.0)
    assert _lightness(p.spans[7]["attrs"]["style"])[1] == pytest.approx(75.0)


def test_scale_max_by_word_leaves_special_and_masked_words_out():
    assert scale_max(WORD_TOKENS, WORD_VALUES) == pytest.approx(1.5)  # tokens: |ld| = 1.5
    assert scale_max(WORD_TOKENS, WORD_VALUES, unit="word") == pytest.approx(1.0)  # 'world' = 0.5 - 1.5
    mask = np.zeros(10, dtype=bool)
    mask[[5, 6]] = True
    assert scale_max(WORD_TOKENS, WORD_VALUES, mask, unit="word") == pytest.approx(0.4)
    mask[5] = False  # 'world' keeps a piece: in the scale again
    assert scale_max(WORD_TOKENS, WORD_VALUES, mask, unit="word") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sentences and paragraphs need the document"):
        scale_max(WORD_TOKENS, WORD_VALUES, unit="sentence")  # a token list alone has no sentences
    with pytest.raises(ValueError, match="units are token, word, sentence, paragraph"):
        scale_max(WORD_TOKENS, WORD_VALUES, unit="chapter")


def test_a_selected_piece_outlines_its_word():
    for selected, outlined in ((2, 1), (3, 1), (1, 1), (6, 5), (8, 7), (0, 0), (9, 9)):
        p = _parse(token_overlay_html(WORD_TOKENS, WORD_VALUES, unit="word", selected=selected))
        assert [i for i, s in p.spans.items() if "lv-sel" in s["attrs"]["class"]] == [outlined], selected
        assert unit_start(units(WORD_TOKENS, WORD_VALUES, unit="word"), selected) == outlined
    assert unit_start(units(WORD_TOKENS, WORD_VALUES), 3) == 3  # tokens: itself


def test_overlay_table_and_top_attributions_list_words():
    mask = np.zeros(10, dtype=bool)
    mask[4] = True
    table = overlay_table(WORD_TOKENS, WORD_VALUES, "attribution", mask, unit="word")
    assert table["position"].tolist() == [0, 1, 4, 5, 7, 9]
    assert table["word"].tolist() == ["<s>", "Hello", ",", "world", "“", "</s>"]
    assert table["attribution"].tolist() == pytest.approx([5.0, 0.4, -0.2, -1.0, 0.2, 0.0])
    assert table["masked"].tolist() == [False, False, True, False, False, False]
    top = top_attributions(WORD_TOKENS, WORD_VALUES, 3, "positive", mask, unit="word")
    assert top.to_dict("list") == {"word": ["<s>", "Hello", "“"], "position": [0, 1, 7],
                                   "attribution": pytest.approx([5.0, 0.4, 0.2])}
    neg = top_attributions(WORD_TOKENS, WORD_VALUES, 3, "negative", mask, unit="word")
    assert neg["word"].tolist() == ["world"]  # ',' is masked
    tokens = overlay_table(WORD_TOKENS, WORD_VALUES, "attribution")
    assert tokens["token"].tolist()[:4] == ["<s>", "H", "ell", "o"] and len(tokens) == 10


def test_wordpiece_words_are_spaced_as_words():
    p = _parse(token_overlay_html(["[CLS]", "the", "un", "##aff", "##able", "cat", "[SEP]"],
                                  [0, 1, 1, 1, 1, 1, 0], unit="word"))
    assert sorted(p.spans) == [0, 1, 2, 5, 6]
    assert p.spans[2]["text"] == "unaffable" and "the unaffable cat" in "".join(p.text)
