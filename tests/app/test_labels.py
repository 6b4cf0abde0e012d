"""Every chart or table names what it depends on (issue 13): the counting rule, the head-importance
definition, the scale of the IG scores and the class explained, for the default and the other option, each
with help pointing at its docs/methods.md section."""
from __future__ import annotations

import pytest

from longviz_core.views import counts as tc
from longviz_core.evaluation.importance import METHOD_NAMES
from pages._ui import labels, shell
from pages._ui.keys import K
from tests.support.apps import ROOT, open_page

MAX_TOKENS = 512  # the head importance of the demo at 512 tokens is in the shared disk cache


def _open(name: str, max_tokens: int = MAX_TOKENS, **state):
    at = open_page(name, max_tokens, **state)
    _ok(at)
    return at


def _ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _captions(at) -> list[str]:
    return [c.value for c in at.caption]


def _labelled(at, label: str, section: str) -> None:
    """`label` is in a caption whose help links `section` of docs/methods.md."""
    hits = [c for c in at.caption if label in c.value]
    assert hits, (label, _captions(at))
    assert any(labels.doc_link(section) in (c.help or "") for c in hits), [c.help for c in hits]


def _click(at, key: str) -> None:
    buttons = [b for b in at.button if b.key == key]
    if buttons:  # absent when the result is already in the disk cache
        buttons[0].click().run()
    _ok(at)


def test_doc_links_name_existing_sections():
    doc = (ROOT / labels.METHODS_DOC).read_text()
    for title in labels.SECTIONS.values():
        assert f"\n## {title}\n" in doc


def test_counts_name_the_counting_rule(demo):
    at = _open("token_counts")
    _labelled(at, labels.count_rule("paper"), "count")
    assert sum(labels.count_rule("paper") in c for c in _captions(at)) == 2  # the bars and the instance chart
    at.radio(key=K.page("counts", "rule")).set_value("per_head").run()
    _ok(at)
    _labelled(at, labels.count_rule("per_head"), "count")
    assert not any(tc.COUNT_RULES["paper"] in c for c in _captions(at))


@pytest.mark.parametrize("name, prefix", [("heatmap_grid", "heatmap"), ("attention_overlay", "overlay")])
def test_attention_pages_name_the_head_importance(demo, name, prefix):
    at = _open(name)
    assert not any(c.startswith("Head importance:") for c in _captions(at))  # no scaling, no label
    at.checkbox(key=K.page(prefix, "scale")).check().run()
    _ok(at)
    _labelled(at, f"Head importance: {METHOD_NAMES['t3vis']}", "importance")
    at.selectbox(key=K.page(prefix, "importance_method")).set_value("michel").run()
    _ok(at)
    _labelled(at, f"Head importance: {METHOD_NAMES['michel']}", "importance")
    assert not any(METHOD_NAMES["t3vis"] in c for c in _captions(at))


def test_attribution_names_class_and_scale(demo):
    P = "attribution"
    at = _open(P, max_tokens=200)
    at.selectbox(key=K.page(P, "steps")).set_value("custom").run()
    at.number_input(key=K.page(P, "steps_n")).set_value(4).run()
    _click(at, K.page(P, "run"))
    target = at.selectbox(key=K.page(P, "target"))
    predicted = target.format_func(target.value)
    _labelled(at, labels.explained(predicted), "class")
    _labelled(at, labels.scores(), "scores")
    _labelled(at, labels.explained(predicted), "tables")
    other = next(i for i in target.options if i != target.format_func(target.value))
    target.set_value(target.options.index(other)).run()
    _click(at, K.page(P, "run"))
    _labelled(at, labels.explained(other), "class")
    assert not any(labels.explained(predicted) + " ·" in c for c in _captions(at))
    assert labels.doc_link("class") in target.help


def test_agreement_names_class_scale_and_importance(demo):
    at = _open("agreement", max_tokens=256)
    _click(at, K.page("similarity", "run_ig"))
    _labelled(at, "Class explained: the predicted class", "agreement")
    _labelled(at, labels.scores(), "scores")
    _labelled(at, f"Head importance: {METHOD_NAMES['t3vis']}", "importance")  # scaled rows are on by default
    at.checkbox(key=K.page("similarity", "scale")).uncheck().run()
    _ok(at)
    assert not any(c.startswith("Head importance:") for c in _captions(at))


def test_faithfulness_names_class_and_importance(demo):
    at = _open("faithfulness", max_tokens=256, **{K.DOC_INDEX: 1})
    _labelled(at, "Class explained: the predicted class", "faithfulness")
    at.checkbox(key=K.page("faithfulness", "scale")).check().run()
    _labelled(at, f"Head importance: {METHOD_NAMES['t3vis']}", "importance")


def test_a_class_name_wraps_only_between_its_words():
    assert shell.wrappable("long_class_name") == "long_\u200bclass_\u200bname"
    assert shell.wrappable("positive review") == "positive review"  # a space is a wrap point already
    assert shell.wrappable("_x__y_") == "_\u200bx_\u200b_\u200by_\u200b"
    assert shell.wrappable("long_class_name").replace("\u200b", "") == "long_class_name"
