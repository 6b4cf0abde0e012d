"""Shareable links: a URL copied from the address bar reopens the same page with the same options.

The AppTest half checks that the query string seeds the session (and that values the widgets would refuse
are dropped); the browser half copies a real URL after changing options and opens it in a new tab (a new
session), so it also covers what Streamlit's frontend writes into the address bar."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pages._ui.keys import K
from support.apps import app_test

TIMEOUT = 300
ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")


def _bound(at) -> bool:
    return bool(at.number_input(key=K.MAX_TOKENS).proto.query_param_key)


@pytest.fixture()
def fresh(demo, monkeypatch):
    monkeypatch.delenv("LONGVIZ_CONFIG", raising=False)

    def make(params: dict | None = None) -> AppTest:
        at = app_test()
        at.query_params = dict(params or {})
        at.run()
        assert _bound(at), 'the sidebar widgets must be bound to the URL (bind="query-params")'
        return at

    return make


def _caption(at) -> str:
    return " ".join(c.value for c in at.caption)


def _metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def test_a_link_reopens_the_same_document_and_settings(fresh):
    at = fresh({"doc_index": "3", "max_tokens": "512"})
    assert not at.exception and not at.error
    assert at.number_input(key=K.DOC_INDEX).value == 3 and at.number_input(key=K.MAX_TOKENS).value == 512
    assert "document 3 (by index)" in _caption(at)
    assert int(_metric(at, "Tokens analysed").replace(",", "")) <= 512
    # the same view built by hand in another session shows the same numbers
    by_hand = fresh()
    by_hand.number_input(key=K.DOC_INDEX).set_value(3).run()
    by_hand.number_input(key=K.MAX_TOKENS).set_value(512).run()
    for label in ("Predicted", "Tokens analysed", "True label"):
        assert _metric(at, label) == _metric(by_hand, label)


def test_a_link_reproduces_a_random_pick(fresh):
    for mode in ("random false negative", "random false positive"):  # at 64 tokens the demo errs one way or both
        clicked = fresh({"doc_mode": mode, "max_tokens": "64"})
        if not clicked.error:
            break
    assert not clicked.error, clicked.error[0].value
    for _ in range(2):
        next(b for b in clicked.button if b.label == "Pick another").click().run()
    assert clicked.session_state[K.DOC_SEED] == 2
    link = fresh({"doc_mode": mode, "max_tokens": "64", "seed": "2"})
    assert link.session_state[K.DOC_SEED] == 2
    assert _caption(link).split(" · ")[0] == _caption(clicked).split(" · ")[0]


def test_values_a_widget_would_refuse_are_dropped(fresh):
    at = fresh({"doc_index": "-5", "max_tokens": "999999", "doc_mode": "rm -rf /", "seed": "x1"})
    assert not at.exception and not at.error
    assert at.selectbox(key=K.DOC_MODE).value == "by index"
    assert at.number_input(key=K.DOC_INDEX).value == 0
    assert at.session_state[K.DOC_SEED] == 0


@pytest.mark.browser
@pytest.mark.slow
def test_a_copied_url_reopens_the_same_view_in_a_new_session(app_server, browser):
    from selenium.webdriver.common.by import By

    from support.browser import (
        click_label,
        link_title,
        nav_links,
        open_app,
        options,
        problems,
        set_number,
        wait_idle,
    )

    base, _log = app_server
    # a short first document (Max tokens empty would analyse document 0 whole, 2,597 tokens, before the test
    # starts), then both numbers typed in the sidebar as a reader types them
    open_app(browser, f"{base}/?max_tokens=256")
    set_number(browser, "Index in the dataset", 3)
    set_number(browser, "Max tokens", 512)
    assert "doc_index=3" in browser.current_url, browser.current_url
    links = nav_links(browser)
    target = next((t for t in ("Attention overlay", "Token counts", "Heatmap grid") if t in links), None)
    assert target is not None, links
    next(a for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')
         if link_title(a) == target).click()
    wait_idle(browser)
    option = options(browser)[0]
    click_label(browser, option)
    url = browser.current_url
    assert "doc_index=3" in url and "max_tokens=512" in url
    assert url.split("?")[0].rstrip("/").endswith(links[target].rstrip("/").split("/")[-1])  # the page

    def view():  # read in the page in one script call (WebDriver's element text: most of a second a read)
        return browser.execute_script("""
            const main = document.querySelector('[data-testid="stMain"]');
            const checked = {};
            main.querySelectorAll('label:has(input[type="checkbox"])').forEach(el => {
              const text = el.innerText.trim();
              if (text) checked[text] = el.querySelector('input').checked;
            });
            return {title: main.querySelector('h1').innerText,
                    caption: [...document.querySelectorAll('[data-testid="stCaptionContainer"]')].map(c => c.innerText),
                    checked: checked};""")

    before = view()
    assert before["checked"][option] is True
    original = browser.current_window_handle
    browser.switch_to.new_window("tab")  # a new tab is a new Streamlit session
    try:
        open_app(browser, url)
        assert not problems(browser), problems(browser)
        # the new session's first run can still be drawing when the app first reads idle under the suite's load
        # (a run once read the caption without the options): read until two readings 0.3 s apart agree
        after, last, deadline = view(), None, time.monotonic() + 60
        while (after != last or not after["checked"]) and time.monotonic() < deadline:
            time.sleep(0.3)
            last, after = after, view()
    finally:
        browser.close()
        browser.switch_to.window(original)
    assert after["checked"].get(option) is True, (option, after)  # the page option came back from the URL
    assert after == before


@pytest.mark.browser
@pytest.mark.slow
def test_a_link_to_a_page_works_as_the_first_request_a_server_gets(demo, browser, tmp_path):
    """Until some session has run app.py, Streamlit treats pages/ as an old-style multipage app: a link
    straight to a page on a freshly started server would run that page file alone (no sidebar, the folder's
    helper modules listed as pages). The pages hand over to app.py instead (shell.run_through_app)."""
    from selenium.webdriver.common.by import By

    from support.browser import nav_links, open_app, page_text, wait_drawn
    from support.servers import serve

    env = {key: value for key, value in os.environ.items() if key != "LONGVIZ_CONFIG"}
    proc, port = serve(ROOT / "app.py", env, tmp_path / "server.log")  # nobody has opened its root
    try:
        open_app(browser, f"http://127.0.0.1:{port}/token_counts?max_tokens=512&counts.k=7")
        wait_drawn(browser, '[data-testid="stMain"] h1')  # the page drawn by app.py's run, not the page-only one
        assert browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h1').text == "Token counts"
        assert list(nav_links(browser)) == ["Document", "Heatmap grid", "Token counts", "Attention overlay",
                                            "Attribution", "Agreement", "Faithfulness", "Explainers"]
        sidebar = page_text(browser, '[data-testid="stSidebar"]')
        assert "Max tokens" in sidebar and "Model" in sidebar
        captions = " ".join(browser.execute_script(
            "return [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')].map(c => c.innerText);"))
        assert "512 tokens" in captions  # the link's settings reached the page
        assert "Top 10 by tokens whose top-7 (over the selected heads) contain it" in page_text(browser)
    finally:
        proc.terminate()
        proc.wait(30)
