"""AppTest helpers: app.py through a wrapper (keeps the sidebar between runs) and page paths."""
from __future__ import annotations

from pathlib import Path

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



def local_app(monkeypatch, max_tokens: int) -> AppTest:
    """The app in local mode (no hosted configuration) on the demo, run once with `max_tokens`, clean."""
    from pages._ui.common import K

    monkeypatch.delenv("LONGVIZ_CONFIG", raising=False)
    at = app_test()
    at.run()
    at.number_input(key=K.MAX_TOKENS).set_value(max_tokens).run()
    assert not at.exception and not at.error
    return at
