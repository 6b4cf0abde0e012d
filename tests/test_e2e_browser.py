"""End to end in a real browser: `streamlit run app.py` on loopback, headless Chromium through every page on the
demo, Integrated Gradients started where a page offers it, every mask and scale option toggled, a screenshot per
page, and no exception or traceback anywhere (page or server log).

Needs Debian's chromium + chromium-driver and selenium. Skipped when Chromium is absent, except in CI
(CI=true), where its absence is a failure. Screenshots go to a temporary directory (printed); with
LONGVIZ_UPDATE_SCREENSHOT=1 the document page at the default settings also replaces docs/screenshot.png."""
from __future__ import annotations

import ast
import os
import shutil
import time

import pytest

from test_load import ROOT, serve

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
IN_CI = os.environ.get("CI", "").lower() == "true"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-quic", "--no-first-run", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1440,1400", "--hide-scrollbars")
MAX_TOKENS = 128  # keeps every page's computation short on a CPU (the README shot uses the default)
# Buttons that start per-document work; the dataset-wide ones are left alone (minutes on a CPU).
RUN_BUTTONS = ("Compute attributions", "Run Integrated Gradients", "Run Integrated Gradients and the deletion test",
               "Run the explainers and the deletion test")
PROBLEM_TEXT = ("Traceback", "Something went wrong", "StreamlitAPIException")


def require_browser() -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    reason = "Chromium and chromedriver are not installed (apt-get install -y chromium chromium-driver)"
    if IN_CI:
        pytest.fail(f"{reason}; CI=true requires the browser test to run")
    pytest.skip(reason)


def page_files() -> list[str]:
    """The page files app.py lists that exist (app.py only shows those)."""
    tree = ast.parse((ROOT / "app.py").read_text())
    pages = next(ast.literal_eval(n.value) for n in ast.walk(tree)
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "PAGES")
    return [f for f, _title, _icon in pages if (ROOT / f).exists()]


@pytest.fixture(scope="module")
def app_server(demo, tmp_path_factory):
    require_browser()
    tmp = tmp_path_factory.mktemp("e2e")
    env = dict(os.environ)
    env.pop("LONGVIZ_CONFIG", None)
    log = tmp / "server.log"
    proc, port = serve(ROOT / "app.py", env, log)
    yield f"http://127.0.0.1:{port}", log
    proc.terminate()
    proc.wait(30)


def chromium(profile, prefs: dict | None = None):
    """Debian's headless Chromium through chromedriver, with its own profile directory (and Chrome `prefs`)."""
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    if prefs:
        opts.add_experimental_option("prefs", prefs)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture(scope="module")
def browser(app_server, tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


# ------------------------------------------------------------------------------------------- helpers
def wait_idle(driver, timeout: float = 240) -> None:
    """Until the app has connected, finished its script run and stayed finished for a moment."""
    from selenium.webdriver.common.by import By

    deadline, calm = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        apps = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"]')
        state = apps[0].get_attribute("data-test-script-state") if apps else None
        calm = calm + 1 if state == "notRunning" else 0
        if calm >= 3:
            return
        time.sleep(0.4)
    raise AssertionError(f"the app did not finish running within {timeout} s (state {state!r})")


def problems(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    def texts(testid):
        return [e.text[:300] for e in driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]')]

    found = [f"exception: {t}" for t in texts("stException")] + [f"error: {t}" for t in texts("stAlertContentError")]
    body = driver.find_element(By.TAG_NAME, "body").text
    found += [f"text: {t}" for t in PROBLEM_TEXT if t in body]
    return found


def set_number(driver, label: str, value: int) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, f'input[aria-label="{label}"]')
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.ENTER)
    wait_idle(driver)


def options(driver, words=("mask", "scale")):
    """Checkbox and toggle labels of the main area that mention masking or scaling."""
    from selenium.webdriver.common.by import By

    out = []
    for el in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] label:has(input[type="checkbox"])'):
        text = el.text.strip()
        if text and any(w in text.lower() for w in words) and el.is_displayed():
            out.append(text)
    return out


def click_label(driver, text: str) -> None:
    from selenium.webdriver.common.by import By

    for el in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] label:has(input[type="checkbox"])'):
        if el.text.strip() == text:
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
            el.click()
            wait_idle(driver)
            return
    raise AssertionError(f"no option labelled {text!r}")


def click_run_buttons(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    clicked = []
    for label in RUN_BUTTONS:
        for b in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] button'):
            if b.text.strip() == label and b.is_displayed():
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", b)
                b.click()
                wait_idle(driver, timeout=300)
                clicked.append(label)
                break
    return clicked


def nav_links(driver) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    links = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')
    return {_title(a): a.get_attribute("href") for a in links}


def _title(link) -> str:
    return link.text.strip().splitlines()[-1]  # the icon comes first, on its own line


def open_app(driver, url: str) -> None:
    driver.get(url)
    wait_idle(driver)


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
                    if _title(a) == title)
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
    if os.environ.get("LONGVIZ_UPDATE_SCREENSHOT") == "1":
        shutil.copy(shots / "readme.png", ROOT / "docs" / "screenshot.png")


DOWNLOADS_APP = """
import sys
sys.path.insert(0, {root!r})
import altair as alt, numpy as np, pandas as pd, streamlit as st
from pages import _export
df = pd.DataFrame({{"token": ["a", "b"], "score": [1.0, 2.0]}})
chart = alt.Chart(df).mark_bar().encode(x="token", y="score")
st.altair_chart(chart)
_export.download_chart(chart, "scores chart")
_export.download_table(df, "scores table")
_export.download_image(np.zeros((4, 4, 3), dtype=np.uint8), "grid")
"""


def test_download_buttons_deliver_files(demo, tmp_path):
    """pages/_export's buttons in a real browser: the files are rendered on click and arrive whole."""
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
