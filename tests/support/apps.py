"""AppTest helpers: app.py through a wrapper (keeps the sidebar between runs), page paths, and the clickable
token overlay (pages/_ui/overlay_view.py): what it was given, and a click on one of its tokens."""
from __future__ import annotations

import json
from pathlib import Path

from streamlit.components.v2.bidi_component.main import _make_trigger_id
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest

TIMEOUT = 300
ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")


def app_test() -> AppTest:
    """app.py run through a two-line wrapper in a temporary directory. AppTest takes a main script with a
    pages/ folder beside it for an old-style multipage app: from the second run on it runs the page file
    alone, so the sidebar (drawn by app.py) vanishes and its widget values are lost. The wrapper's directory
    has no pages/ folder; app.py still builds its st.navigation from absolute paths."""
    return AppTest.from_string(f"import runpy\nrunpy.run_path({APP!r}, run_name='__main__')\n",
                               default_timeout=TIMEOUT)


def page(name: str) -> str:
    """A page's path for AppTest.switch_page (absolute: the wrapper lives elsewhere)."""
    return str(ROOT / "pages" / f"{name}.py")



def open_page(name: str, max_tokens: int, **state) -> AppTest:
    """The app run once with `max_tokens` and the session `state` given (widget keys -> values), then switched
    to the page `name` and run there; the caller checks what it shows."""
    from pages._ui.keys import K

    at = app_test()
    at.session_state[K.MAX_TOKENS] = max_tokens
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(page(name)).run()
    return at


def local_app(monkeypatch, max_tokens: int) -> AppTest:
    """The app in local mode (no hosted configuration) on the demo, run once with `max_tokens`, clean."""
    from pages._ui.keys import K

    monkeypatch.delenv("LONGVIZ_CONFIG", raising=False)
    at = app_test()
    at.run()
    at.number_input(key=K.MAX_TOKENS).set_value(max_tokens).run()
    assert not at.exception and not at.error
    return at


def settle(at: AppTest) -> AppTest:
    """Wait for the first-flip scans the deletion pages started in the background (pages/_ui/deletion.py:
    flips_stage), then run again, as the page's fragment does when a scan ends; the page then shows the flips."""
    from longviz_core.runtime import JOBS
    from pages._ui.deletion import FLIPS

    for job in JOBS.running(FLIPS):
        assert job.join(TIMEOUT), "a first-flip scan did not end in time"
    return at.run()


def overlays(at: AppTest) -> list[dict]:
    """The data of every token overlay the last run drew (AppTest knows the component as an unknown element):
    its HTML, the selected position, whether a click selects."""
    return [json.loads(e.proto.json) for e in at.get("bidi_component")]


def overlay_html(at: AppTest) -> str:
    """The HTML of the page's (only) token overlay."""
    (shown,) = overlays(at)
    return shown["html"]


def click_token(at: AppTest, value, index: int = 0) -> AppTest:
    """Rerun as the browser does after a click on a token of overlay `index`: every widget's state plus the
    component's trigger event carrying `value` (the token's position, as the component's script sends it).
    AppTest cannot click inside a component, so the event goes in by hand."""
    component = at.get("bidi_component")[index].proto
    states = at._tree.get_widget_states()
    event = json.dumps([{"event": "pick", "value": value}])
    states.widgets.append(WidgetState(id=_make_trigger_id(component.id, "events"), json_trigger_value=event))
    return at._run(states)
