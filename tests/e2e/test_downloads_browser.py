"""The downloads in a real browser: `streamlit run` of a small page with pages/_ui/export's buttons on loopback,
headless Chromium clicking each; the files are rendered on the click and arrive whole. (Every page of the app in a
browser, as a user walks it, is tests/e2e/test_pages_browser.py.)

Needs Debian's chromium + chromium-driver and selenium. Skipped when Chromium is absent, except in CI
(CI=true), where its absence is a failure."""
from __future__ import annotations

import os
import time

import pytest

from support.browser import chromium, open_app, require_browser
from support.servers import ROOT, serve

pytestmark = [pytest.mark.browser, pytest.mark.slow]


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
