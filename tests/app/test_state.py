"""State that follows the document (issue 15): the attribution target and the selected token reset on a new
document (the target unless pinned), both round-trip through the URL, the mask toggle keeps the selection, a
click on a token of the overlay selects it everywhere (number box, tables, URL, outline), and no notice or
progress bar outlives its job."""
from __future__ import annotations

import pytest

from pages._ui import overlay_view, shell, sidebar, state
from pages._ui.keys import K
from tests.support.apps import app_test, click_token, overlay_html, overlays, page

P = "attribution"
MAX_TOKENS, STEPS = 128, 2


def _ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _open(query: dict | None = None, **state_values):
    at = app_test()
    at.session_state[K.MAX_TOKENS] = MAX_TOKENS
    at.session_state[K.page(P, "steps")] = "custom"
    at.session_state[K.page(P, "steps_n")] = STEPS
    for key, value in state_values.items():
        at.session_state[key] = value
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    at.switch_page(page(P)).run()
    _compute(at)
    return at


def _compute(at) -> None:
    buttons = [b for b in at.button if b.key == K.page(P, "run")]
    if buttons:  # absent when these attributions are in the disk cache
        buttons[0].click().run()
    _ok(at)


def _target(at):
    box = at.selectbox(key=K.page(P, "target"))
    return box.value, box.format_func(box.value)


def _pos(at) -> int:
    return int(at.number_input(key=K.page(P, "pos")).value)


def _doc(at, index: int) -> None:
    at.sidebar.number_input(key=K.DOC_INDEX).set_value(index).run()
    _compute(at)


@pytest.fixture()
def at(demo):
    return _open()


def test_new_document_resets_target_and_selection(at):
    fresh = _open(**{K.DOC_INDEX: 1})  # what document 1 opens with: its predicted class and its top token
    predicted_1, top_1 = _target(fresh), _pos(fresh)
    predicted_0 = _target(at)
    box = at.selectbox(key=K.page(P, "target"))
    other = next(i for i in range(len(box.options)) if i != box.value)
    box.set_value(other).run()
    _compute(at)
    at.number_input(key=K.page(P, "pos")).set_value(top_1 + 1).run()
    _ok(at)
    assert _target(at)[0] == other and _pos(at) == top_1 + 1
    assert any(m.label == "Attribution label" and m.value == shell.wrappable(box.format_func(other))
               for m in at.metric)
    _doc(at, 1)
    assert _target(at) == predicted_1 and _pos(at) == top_1
    _doc(at, 0)
    assert _target(at) == predicted_0


def test_pinned_target_survives_a_new_document(at):
    box = at.selectbox(key=K.page(P, "target"))
    other = next(i for i in range(len(box.options)) if i != box.value)
    box.set_value(other).run()
    at.checkbox(key=K.page(P, "pin_target")).check().run()
    _compute(at)
    _doc(at, 1)
    assert _target(at)[0] == other


def test_target_and_token_round_trip_through_the_url(at):
    box = at.selectbox(key=K.page(P, "target"))
    other = next(i for i in range(len(box.options)) if i != box.value)
    box.set_value(other).run()
    _compute(at)
    at.number_input(key=K.page(P, "pos")).set_value(11).run()
    _ok(at)
    name = box.format_func(other)
    assert at.query_params[state.TARGET_PARAM] == name and at.query_params[state.TOKEN_PARAM] == "11"
    again = _open({state.TARGET_PARAM: name, state.TOKEN_PARAM: "11"})
    assert _target(again) == (other, name) and _pos(again) == 11


def test_mask_toggle_keeps_the_selection(at):
    table = K.page(P, "t_tokens_positive")
    chosen = int(_table(at)["position"].iloc[3])  # the 4th most positive token
    at.number_input(key=K.page(P, "pos")).set_value(chosen).run()
    _ok(at)
    assert at.session_state[table]["selection"]["rows"] == [3]  # the table shows the box's token
    for masked in (True, False):
        at.toggle(key=K.page(P, "mask")).set_value(masked).run()
        _ok(at)
        assert _pos(at) == chosen
        positions = _table(at)["position"].tolist()
        rows = at.session_state[table]["selection"]["rows"]
        assert [positions[r] for r in rows] == ([chosen] if chosen in positions else [])
        assert f'lv-sel" data-pos="{chosen}"' in overlay_html(at) and overlays(at)[0]["selected"] == chosen


def _table(at, table: str = "t_tokens_positive"):
    """The values of table `table` (by default the top 10 positive tokens)."""
    return next(d for d in at.dataframe if d.key == K.page(P, table)).value


def _selected_rows(at, table: str) -> list[int]:
    """The token positions of the rows table `table` shows selected."""
    positions = next(d.value["position"].tolist() for d in at.dataframe if d.key == K.page(P, table))
    return [positions[r] for r in at.session_state[K.page(P, table)]["selection"]["rows"]]


def test_a_click_on_the_overlay_selects_the_token_everywhere(at):
    (shown,) = overlays(at)
    assert shown["clickable"] and shown["selected"] == _pos(at)
    top = _table(at)["position"].tolist()  # the top-10 positive tokens
    chosen, elsewhere = top[2], next(p for p in range(MAX_TOKENS) if p not in top and p != _pos(at))
    click_token(at, chosen)
    _ok(at)
    assert _pos(at) == chosen and at.query_params[state.TOKEN_PARAM] == str(chosen)
    assert _selected_rows(at, "t_tokens_positive") == [chosen] and _selected_rows(at, "t_tokens_negative") == []
    assert overlays(at)[0]["selected"] == chosen and f'lv-sel" data-pos="{chosen}"' in overlay_html(at)
    token = next(m for m in at.metric if m.label == "Token")
    assert f"position {chosen:,} of {MAX_TOKENS:,}" in token.delta
    click_token(at, elsewhere)  # a token in no table: the number box takes it, no row stays selected
    _ok(at)
    assert _pos(at) == elsewhere and _selected_rows(at, "t_tokens_positive") == []
    for masked in (True, False):  # the mask toggle keeps the clicked token
        at.toggle(key=K.page(P, "mask")).set_value(masked).run()
        _ok(at)
        assert _pos(at) == elsewhere and overlays(at)[0]["selected"] == elsewhere
    for bad in (MAX_TOKENS, -1, "3", True, 2.5, None):  # what no token of this overlay sends: ignored
        click_token(at, bad)
        _ok(at)
        assert _pos(at) == elsewhere


def test_clicked_position_accepts_only_a_position_of_the_overlay():
    assert [overlay_view.clicked_position(v, 10) for v in (0, 9, 10, -1, "3", True, 2.5, None)] == [
        0, 9, None, None, None, None, None, None]


def test_no_notice_or_progress_bar_outlives_its_job(demo, monkeypatch):
    from longviz_core import attribution

    monkeypatch.setattr(attribution, "cached_attribution", lambda *a, **kw: None)  # the page must offer the job
    at = app_test()
    at.session_state[K.MAX_TOKENS] = MAX_TOKENS
    at.session_state[K.page(P, "steps")] = "custom"
    at.session_state[K.page(P, "steps_n")] = STEPS
    at.run()
    at.switch_page(page(P)).run()
    _ok(at)
    assert any("Not computed yet for these settings" in i.value for i in at.info)
    at.button(key=K.page(P, "run")).click().run()
    _ok(at)
    assert not any("Not computed yet for these settings" in i.value for i in at.info)
    assert not at.get("progress")
    assert not [b for b in at.button if b.key == K.page(P, "run")]


def test_progress_bar_removes_itself_when_done():
    from streamlit.testing.v1 import AppTest

    def script():
        from pages._ui import shell

        update = shell.progress_bar("Job")
        update(0.5, "half")
        update(1.0, "done")

    at = AppTest.from_function(script, default_timeout=30).run()
    assert not at.get("progress")


def test_pasted_text_says_it_is_not_in_the_link(demo):
    at = app_test()
    at.session_state[K.DOC_MODE] = "pasted text"
    at.session_state[K.PASTED] = "A short text about attention."
    at.session_state[K.MAX_TOKENS] = MAX_TOKENS
    at.run()
    _ok(at)
    assert sidebar.NOT_IN_LINK in [c.value for c in at.sidebar.caption]
    assert K.PASTED not in at.query_params
