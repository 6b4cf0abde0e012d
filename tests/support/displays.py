"""Reading a notebook display (longviz_core.notebook's HTML) as a browser would: its tags, the token boxes of its
overlays, its tables, its images and its visible text, for the display and quickstart notebook tests."""
from __future__ import annotations

import re
from html.parser import HTMLParser

# what a display may hold: text, boxes, tables, line breaks, an inline stylesheet and chart images; nothing that
# runs or loads
ALLOWED_TAGS = {"div", "span", "b", "br", "table", "thead", "tbody", "tr", "th", "td", "style", "img"}


class Display(HTMLParser):
    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[str] = []  # on* attributes: none may appear
        self.spans: dict[int, dict] = {}  # data-pos -> {"title", "text"}
        self.tables: list[list[list[str]]] = []  # each table's rows of cell texts, header row first
        self.images: list[str] = []  # every <img src>
        self.boxes: list[str] = []  # the style of every div that scrolls (overflow:auto)
        self.text: list[str] = []  # visible text, styles left out
        self._span_stack: list[int | None] = []
        self._cell: list[str] | None = None
        self._in_style = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        self.handlers += [k for k in a if k.lower().startswith("on")]
        if tag == "style":
            self._in_style = True
        elif tag == "span":
            pos = int(a["data-pos"]) if "data-pos" in a else None
            if pos is not None:
                self.spans[pos] = {"title": a.get("title", ""), "text": ""}
            self._span_stack.append(pos)
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("th", "td"):
            self._cell = self.tables[-1][-1]
            self._cell.append("")
        elif tag == "img":
            self.images.append(a.get("src", ""))
        elif tag == "div" and "overflow:auto" in (a.get("style") or "").replace(" ", ""):
            self.boxes.append(a["style"])
        elif tag == "br":
            self.text.append("\n")

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False
        elif tag == "span":
            self._span_stack.pop()
        elif tag in ("th", "td"):
            self._cell = None

    def handle_data(self, data):
        if self._in_style:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell[-1] += data.strip()
        owner = next((p for p in reversed(self._span_stack) if p is not None), None)
        if owner is not None:
            self.spans[owner]["text"] += data

    @property
    def visible(self) -> str:
        return "".join(self.text)

    def span_values(self) -> list[float]:
        """Each token box's value from its hover text ("#i label: +0.1234", maybe " (masked)"), in order."""
        return [float(re.search(r": ([+-][^ ]+)(?: \(masked\))?$", self.spans[i]["title"]).group(1))
                for i in sorted(self.spans)]

    def tables_with(self, header: list[str]) -> list[list[dict[str, str]]]:
        """Every table whose header row is `header`, in order, each as its rows {column: cell}."""
        return [[dict(zip(header, row)) for row in t[1:]] for t in self.tables if t and t[0] == header]

    def table(self, header: list[str]) -> list[dict[str, str]]:
        """The rows, as {column: cell}, of the one table whose header row is `header`."""
        found = self.tables_with(header)
        assert len(found) == 1, f"{len(found)} tables with the header {header}; have {[t[0] for t in self.tables]}"
        return found[0]


def inert(html: str) -> Display:
    """The display, after checking that it runs and loads nothing: only ALLOWED_TAGS, no event handler, images
    from data: URIs alone, no url(...) or @import in its styles."""
    shown = Display(html)
    assert set(shown.tags) <= ALLOWED_TAGS, set(shown.tags) - ALLOWED_TAGS
    assert not shown.handlers, shown.handlers
    assert all(src.startswith("data:image/svg+xml;base64,") for src in shown.images), shown.images
    assert "url(" not in html and "@import" not in html and "<script" not in html.lower()
    return shown
