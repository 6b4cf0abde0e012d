"""The definitions a chart or table depends on, named the same way on every page: the counting rule, the
head-importance definition, the scale of the IG scores and the class explained. Each label's help points at
the docs/methods.md section that defines it, so a reader can check what a number means."""
from __future__ import annotations

import streamlit as st

from longviz_core.views import counts as tc

METHODS_DOC = "docs/methods.md"
# docs/methods.md section titles (GitHub-style anchors follow from them)
SECTIONS = {
    "count": "Top-k counts",
    "importance": "Head importance",
    "scores": "Integrated Gradients",
    "class": "Integrated Gradients",
    "tables": "Attribution tables",
    "agreement": "Agreement metrics",
    "faithfulness": "Faithfulness",
    "words": "Words",
    "units": "Units",
}
NORMALISED = "L2-normalised over tokens, sign kept (paper §2)"
RAW = "raw sums over the embedding dimension (they add up to F(x) − F(baseline))"


def doc_link(section: str) -> str:
    """Where a definition lives, as help text: the methods document and the section's anchor."""
    title = SECTIONS[section]
    anchor = title.lower().replace(" ", "-")
    return f"Defined in {METHODS_DOC}, section “{title}” ({METHODS_DOC}#{anchor})."


def count_rule(rule: str) -> str:
    return f"Count: {tc.COUNT_RULES[rule]}"


def importance(hi) -> str:
    """hi: a pages._ui.importance.HeadImportance (a computed one's description starts with its name)."""
    named = hi.description if hi.description.startswith(hi.name) else f"{hi.name} ({hi.description})"
    return f"Head importance: {named}"


def scores(raw: bool = False) -> str:
    return f"IG scores: {RAW if raw else NORMALISED}"


def explained(class_name: str) -> str:
    return f"Class explained: {class_name}"


def caption(*labels: str, sections: tuple[str, ...] = (), where=st) -> None:
    """One caption line naming `labels`, its help linking every section in `sections`."""
    where.caption(" · ".join(labels), help=" ".join(doc_link(s) for s in dict.fromkeys(sections)) or None)
