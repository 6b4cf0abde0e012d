"""End to end in a real browser: `streamlit run app.py` on loopback, headless Chromium through every page on the
demo, Integrated Gradients started where a page offers it, every mask and scale option toggled, a screenshot per
page, and no exception or traceback anywhere (page or server log).

Needs Debian's chromium + chromium-driver and selenium. Skipped when Chromium is absent, except in CI
(CI=true), where its absence is a failure. Screenshots go to a temporary directory (printed); the README's
screenshot comes from test_pages_browser.py."""
from __future__ import annotations

import os
import time

import pytest

from support.browser import (
    chromium,
    click_label,
    click_run_buttons,
    link_title,
    nav_links,
    open_app,
    options,
    page_files,
    problems,
    require_browser,
    set_number,
    wait_idle,
)
from support.servers import ROOT, serve

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MAX_TOKENS = 128  # keeps every page's computation short on a CPU (the README shot uses the default)




# ------------------------------------------------------------------------------------------------ test
def test_every_page_in_a_real_browser(app_server, browser, tmp_path_factory):
    from selenium.webdriver.common.by import By

    base, log = app_server
    shots = tmp_path_factory.mktemp("screenshots")
    open_app(browser, base)
    assert not problems(browser), problems(browser)
    browser.save_screenshot(str(shots / "readme.png"))  # the document page at the default settings
    set_number(browser, "Max tokens", MAX_TOKENS)
    assert not problems(browser), problems(browser)
    links = nav_links(browser)
    assert len(links) == len(page_files()), (links, page_files())
    report = []
    for title in list(links):
        started = time.monotonic()
        link = next(a for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')
                    if link_title(a) == title)
        link.click()  # in-app navigation: the same session, as a user moves between pages
        wait_idle(browser)
        assert not problems(browser), (title, problems(browser))
        clicked = click_run_buttons(browser)
        assert not problems(browser), (title, clicked, problems(browser))
        toggled = []
        for label in options(browser):
            click_label(browser, label)  # on ...
            assert not problems(browser), (title, label, problems(browser))
            toggled.append(label)
        shot = shots / f"{title.lower().replace(' ', '_')}.png"
        browser.save_screenshot(str(shot))
        for label in toggled:
            click_label(browser, label)  # ... and off again
            assert not problems(browser), (title, label, problems(browser))
        report.append((title, clicked, toggled, time.monotonic() - started))
    print(f"\nscreenshots in {shots}")
    for title, clicked, toggled, seconds in report:
        print(f"  {title} ({seconds:.0f} s): ran {clicked or '-'}; toggled {toggled or '-'}")
    assert any(toggled for _, _, toggled, _ in report), "no page offered a mask or scale option"
    server_log = log.read_text()
    assert "Traceback" not in server_log, server_log[-3000:]


DOWNLOADS_APP = """
import sys
sys.path.insert(0, {root!r})
import altair as alt, numpy as np, pandas as pd, streamlit as st
from pages._ui import export as _export
df = pd.DataFrame({{"token": ["a", "b"], "score": [1.0, 2.0]}})
chart = alt.Chart(df).mark_bar().encode(x="token", y="score")
st.altair_chart(chart)
_export.download_chart(chart, "scores chart")
_export.download_table(df, "scores table")
_export.download_image(np.zeros((4, 4, 3), dtype=np.uint8), "grid")
"""


def test_download_buttons_deliver_files(demo, tmp_path):
    """pages/_ui/export's buttons in a real browser: the files are rendered on click and arrive whole."""
    require_browser()
    from selenium.webdriver.common.by import By

    script = tmp_path / "downloads_app.py"
    script.write_text(DOWNLOADS_APP.format(root=str(ROOT)))
    proc, port = serve(script, dict(os.environ), tmp_path / "server.log")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver = chromium(tmp_path / "profile", {"download.default_directory": str(downloads),
                                             "download.prompt_for_download": False,
                                             "profile.default_content_setting_values.automatic_downloads": 1})
    try:
        open_app(driver, f"http://127.0.0.1:{port}")
        buttons = [b for b in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] button') if "⬇" in b.text]
        assert [b.text for b in buttons] == ["⬇ PNG", "⬇ SVG", "⬇ CSV", "⬇ PNG"]
        expected = ["scores_chart.png", "scores_chart.svg", "scores_table.csv", "grid.png"]
        for b, name in zip(buttons, expected):
            b.click()
            deadline = time.monotonic() + 60
            while not (downloads / name).is_file() and time.monotonic() < deadline:
                time.sleep(0.3)  # rendered on the server at the click, then written (.crdownload first)
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(30)
    assert sorted(p.name for p in downloads.iterdir()) == sorted(expected)
    assert (downloads / "scores_chart.png").read_bytes().startswith(b"\x89PNG")
    assert (downloads / "grid.png").read_bytes().startswith(b"\x89PNG")
    assert (downloads / "scores_chart.svg").read_bytes().startswith(b"<svg")
    assert (downloads / "scores_table.csv").read_bytes().decode("utf-8-sig").splitlines()[1:] == ["a,1.0", "b,2.0"]
