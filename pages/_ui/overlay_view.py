"""A token overlay the reader can click: HTML whose tokens carry `data-pos="i"` (longviz_core.figures.text's
token_overlay_html builds it, escaped) shown in a box of its own height that scrolls. A click on a token reports
its position to Python; the selected token is outlined and, when the selection changes, scrolled into view
inside the box, so the page itself does not jump. One Custom Component (Streamlit's components v2: inline HTML,
CSS and JS, no build step); the HTML it shows is the caller's, set as it is, never text of its own."""
from __future__ import annotations

from typing import Callable

import streamlit as st

from longviz_core.figures.layout import OVERLAY_HEIGHT

SELECTED = "lv-sel"  # the class token_overlay_html gives the selected token (its outline)
HEIGHT = OVERLAY_HEIGHT  # px: a long document scrolls inside this box

_CSS = """
.lv-box { box-sizing: border-box; overflow-y: auto; padding: 0.25rem 0.75rem; border-radius: 0.5rem;
          border: 1px solid var(--st-border-color, rgba(49, 51, 63, 0.2)); background: #fff; }
.lv-box.lv-pick [data-pos] { cursor: pointer; }
.lv-box.lv-pick [data-pos]:hover { box-shadow: inset 0 -2px 0 #1f6feb; }
"""

# Called on every run that sends new data: the HTML is set only when it changed (keeps the box's scroll), the
# outline follows `selected`, and after new HTML or a new selection (a number typed, a table row, a link, another
# document) the box scrolls to the selected token if it is out of view (a clicked token is in view already).
_JS = """
export default function ({ data, parentElement, setTriggerValue }) {
  const box = parentElement.querySelector(".lv-box");
  box.style.maxHeight = `${data.height}px`;
  const fresh = box.lvHtml !== data.html;
  if (fresh) {
    box.innerHTML = data.html;
    box.lvHtml = data.html;
  }
  const mark = (pos) => {
    box.querySelectorAll(`.${data.selected_class}`).forEach((e) => e.classList.remove(data.selected_class));
    const el = Number.isInteger(pos) ? box.querySelector(`[data-pos="${pos}"]`) : null;
    if (el) el.classList.add(data.selected_class);
    return el;
  };
  const el = mark(data.selected);
  if (el && (fresh || box.lvShown !== data.selected)) {
    requestAnimationFrame(() => {
      const r = el.getBoundingClientRect(), b = box.getBoundingClientRect();
      if (r.top < b.top || r.bottom > b.bottom) {
        box.scrollTop += r.top - b.top - (box.clientHeight - r.height) / 2;
      }
    });
  }
  box.lvShown = data.selected;
  box.classList.toggle("lv-pick", data.clickable);
  box.onclick = data.clickable ? (e) => {
    const t = e.target.closest("[data-pos]");
    if (!t || !box.contains(t)) return;
    const pos = Number(t.dataset.pos);
    mark(pos);
    box.lvShown = pos;
    setTriggerValue("pick", pos);
  } : null;
}
"""

_component = st.components.v2.component("longviz.token_overlay", html='<div class="lv-box"></div>', css=_CSS,
                                        js=_JS)


def clicked_position(value, n: int) -> int | None:
    """The token position a click reported (the browser's value, not trusted), or None when it is not one of
    the `n` positions."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        return None
    return value


def show(body_html: str, *, key: str, n: int, selected: int | None = None,
         on_pick: Callable[[int], None] | None = None, height: int = HEIGHT) -> None:
    """`body_html` (tokens 0..n-1 carrying data-pos) in a scrolling box `height` px high at most, `selected`
    outlined and scrolled into view; with `on_pick`, a click on a token calls it with the token's position
    before the rerun's script runs (so widgets drawn above the overlay show the new position)."""
    callbacks = {}
    if on_pick is not None:
        def picked() -> None:
            position = clicked_position(st.session_state[key].get("pick"), n)
            if position is not None:
                on_pick(position)

        callbacks["on_pick_change"] = picked
    data = {"html": body_html, "selected": selected, "height": int(height), "clickable": on_pick is not None,
            "selected_class": SELECTED}
    _component(key=key, data=data, **callbacks)
