"""Token overlays: the document's text with one coloured box per model token (paper Figs 8, 9, 16).

Shared by the attribution overlay (mode="diverging": green positive / red negative, saturation by magnitude)
and the summed-attention overlay (mode="sequential": white -> red). The output is a self-contained HTML
string: every piece of text is escaped, so a document containing markup shows as text.

Readability: tokens are decoded by `longviz_core.tokens` (byte-level BPE markers become what they encode, 'Ġ'
-> space, 'Ċ' -> line break), subword pieces are joined without a space, and the space that starts a word is
placed *between* boxes so a word reads as one unit. Special tokens (<s>, </s>, [CLS], ...) appear as small grey
tags. With a unit other than "token" (a word, sentence or paragraph: views.units, model.segments) each unit is one
box, its value the sum of its tokens' (docs/methods.md, "Units").

`attribution_header_html` is the attribution overlay's header row (paper Fig 9), with F(x) − F(baseline).
"""
from __future__ import annotations

import html
import math

import numpy as np

from ..views.units import Segments, Unit, unit_start, units

_MODES = ("diverging", "sequential")
# Hue and lightness follow captum's visualisation (hsl(120|0, 75%, 100 - 50 * |x|)): white at 0,
# a mid green/red at the extremes, where black text stays readable.
_HUE = {"pos": 120, "neg": 0}

_STYLE = (
    "<style>"
    ".lv-ov{line-height:2.0;font-family:ui-sans-serif,system-ui,sans-serif;font-size:0.95rem;"
    "word-wrap:break-word;color:#111}"
    ".lv-ov .lv-t{border-radius:2px;padding:1px 0}"
    ".lv-ov .lv-sp{font-size:0.7em;color:#666;border:1px solid #bbb;border-radius:3px;padding:0 2px;"
    "margin:0 2px;font-family:ui-monospace,monospace}"
    ".lv-ov .lv-ws{color:#999;font-size:0.8em}"
    ".lv-ov .lv-m{color:#aaa;background:#f1f1f1}"
    ".lv-ov .lv-sel{outline:2px solid #1f6feb;outline-offset:1px}"
    ".lv-lg{font-family:ui-sans-serif,system-ui,sans-serif;font-size:0.8rem;color:#333;margin:4px 0}"
    ".lv-lg .lv-bar{display:inline-block;width:220px;height:12px;border:1px solid #ccc;vertical-align:middle;"
    "margin:0 6px}"
    "</style>"
)


def _colour(x: float, mode: str) -> str:
    """Background for a value already scaled to [-1, 1] (diverging) or [0, 1] (sequential)."""
    if not math.isfinite(x) or x == 0.0:
        return ""
    mag = min(abs(x), 1.0)
    hue = _HUE["neg"] if (mode == "sequential" or x < 0) else _HUE["pos"]
    return f"background-color:hsl({hue},75%,{100 - 50 * mag:.1f}%)"


def _fmt(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:+.4g}"


def token_overlay_html(
    tokens,
    values,
    *,
    mode: str = "diverging",
    mask=None,
    vmax: float | None = None,
    title: str | None = None,
    positions: bool = True,
    selected: int | None = None,
    unit: Unit | Segments = "token",
) -> str:
    """HTML for the tokens coloured by `values` (one per token).

    mode: "diverging" (green > 0, red < 0, saturation |v| / vmax) or "sequential" (white -> red, v / vmax).
    mask: optional booleans, True = masked: shown greyed, uncoloured and left out of the automatic vmax.
    vmax: value of full saturation; default the largest |value| among unmasked units.
    title: optional heading above the text. positions: include the position in each unit's hover text.
    selected: a token position to outline (the token picked in the UI): with larger units, the unit containing it.
    unit: "token" (one box per token, the paper's view), "word", or the Segments of the document
    (model.segments.segment(analysis, unit): words, sentences, paragraphs): one box per unit, coloured by the sum
    of its tokens' values, masked only if all its tokens are; its data-pos is its first token, so a click on a
    unit selects that token."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    shown = units(tokens, values, mask, unit)
    if vmax is None:
        live = np.abs(shown.values[~shown.masked & np.isfinite(shown.values)])
        vmax = float(live.max()) if live.size else 0.0
    vmax = float(vmax)
    if not math.isfinite(vmax) or vmax < 0:
        raise ValueError(f"vmax must be a finite non-negative number, got {vmax}")
    scale = vmax if vmax > 0 else 1.0
    if selected is not None:
        selected = unit_start(shown, int(selected))

    out = [_STYLE, '<div class="lv-ov">']
    if title:
        out.append(f'<div style="font-weight:600;margin-bottom:4px">{html.escape(title)}</div>')
    for i, text, label, v, m, sp in zip(shown.positions, shown.text, shown.labels, shown.values, shown.masked,
                                        shown.special):
        hover = (f"#{i} " if positions else "") + f"{label}: {_fmt(v)}" + (" (masked)" if m else "")
        attrs = f'data-pos="{i}" title="{html.escape(hover, quote=True)}"'
        sel = " lv-sel" if selected is not None and i == selected else ""
        if m:
            cls, style = "lv-t lv-m", ""
        else:
            x = v / scale if mode == "diverging" else max(v, 0.0) / scale
            cls, style = "lv-t", _colour(x, mode)
        style_attr = f' style="{style}"' if style else ""
        if sp:
            out.append(f' <span class="{cls} lv-sp{sel}" {attrs}{style_attr}>{html.escape(text)}</span> ')
            continue
        core = text.strip()
        if core:
            lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()):]
            body = "<br>".join(html.escape(part) for part in core.split("\n"))
        else:  # a unit that is only whitespace still carries a value: show a glyph, then its line breaks
            lead, trail = "", "\n" * text.count("\n")
            body = '<span class="lv-ws">' + ("↵" * text.count("\n") or "␣") + "</span>"
        out.append(_whitespace_html(lead))
        out.append(f'<span class="{cls}{sel}" {attrs}{style_attr}>{body}</span>')
        out.append(_whitespace_html(trail))
    out.append("</div>")
    return "".join(out)


def scale_max(tokens, values, mask=None, unit: Unit | Segments = "token") -> float:
    """The value of full saturation: the largest |value| among units (tokens, or larger units with their tokens'
    values summed, as token_overlay_html shows them) that are neither masked nor special. <s> gathers most of
    the attention (hundreds of times a word's) and would take the whole colour scale, so special tokens stay
    out of it even unmasked; their colour saturates. 0.0 when no unit qualifies."""
    shown = units(tokens, values, mask, unit)
    vals = np.abs(shown.values)  # (units,)
    live = ~shown.special & ~shown.masked & np.isfinite(vals)
    return float(vals[live].max()) if live.any() else 0.0


def _whitespace_html(ws: str) -> str:
    if not ws:
        return ""
    breaks = ws.count("\n")
    return "<br>" * breaks if breaks else " "


def legend_html(mode: str = "diverging", vmin: float | None = None, vmax: float = 1.0, label: str = "") -> str:
    """A colour bar with its end values: diverging runs red (vmin, default -vmax) - white (0) - green (vmax);
    sequential runs white (vmin, default 0) - red (vmax)."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    vmax = float(vmax)
    if mode == "diverging":
        vmin = -abs(vmax) if vmin is None else float(vmin)
        stops = "hsl(0,75%,50%),#fff,hsl(120,75%,50%)"
        ticks = (f"{_fmt(vmin)} (negative)", f"{_fmt(vmax)} (positive)")
    else:
        vmin = 0.0 if vmin is None else float(vmin)
        stops = "#fff,hsl(0,75%,50%)"
        ticks = (_fmt(vmin).lstrip("+"), _fmt(vmax).lstrip("+"))
    lab = f"<b>{html.escape(label)}</b> " if label else ""
    return (
        f'{_STYLE}<div class="lv-lg">{lab}{html.escape(ticks[0])}'
        f'<span class="lv-bar" style="background:linear-gradient(to right,{stops})"></span>'
        f"{html.escape(ticks[1])}</div>"
    )


def attribution_header_html(
    true_label: str | None,
    predicted_label: str,
    predicted_prob: float,
    attribution_label: str,
    attribution_score: float,
    prob_input: float,
    prob_baseline: float,
    note: str | None = None,
) -> str:
    """The attribution overlay's header (paper Fig 9, captum's visualize_text): true label, predicted label
    and its probability, attribution label (the class explained), attribution score (the sum of the
    L2-normalised scores, captum's VisualizationDataRecord.attr_score) and beside it F(x) − F(baseline),
    the probability the raw attributions share out, which the normalisation hides. `note` (e.g.
    Attribution.weak_explanation) is shown under the header."""
    cells = [
        ("True label", "—" if true_label is None else str(true_label)),
        ("Predicted label", f"{predicted_label} ({float(predicted_prob):.2f})"),
        ("Attribution label", str(attribution_label)),
        ("Attribution score", f"{float(attribution_score):.2f}"),
        ("F(x) − F(baseline)", f"{float(prob_input):.4f} − {float(prob_baseline):.4f} = "
                               f"{float(prob_input) - float(prob_baseline):+.4f}"),
    ]
    th = "".join(f'<th style="text-align:left;padding:2px 10px 2px 0">{html.escape(h)}</th>' for h, _ in cells)
    td = "".join(f'<td style="padding:2px 10px 2px 0">{html.escape(v)}</td>' for _, v in cells)
    out = (f'{_STYLE}<div class="lv-lg"><table style="border-collapse:collapse">'
           f"<tr>{th}</tr><tr>{td}</tr></table>")
    if note:
        out += (f'<div class="lv-note" style="background:#fff4e5;border-left:3px solid #f0a020;padding:4px 8px;'
                f'margin-top:4px">{html.escape(note)}</div>')
    return out + "</div>"
