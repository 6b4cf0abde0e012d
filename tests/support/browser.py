"""Headless Chromium for the end-to-end tests and the first-load benchmark: the launcher and the page
helpers (waiting, problems on the page, widgets by label)."""
from __future__ import annotations

import ast
import os
import shutil
import time

import pytest

from support.servers import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


CHROMEDRIVER = shutil.which("chromedriver")


IN_CI = os.environ.get("CI", "").lower() == "true"


FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-quic", "--no-first-run", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1440,1400", "--hide-scrollbars")


# Buttons that start per-document work; the dataset-wide ones are left alone (minutes on a CPU).
RUN_BUTTONS = ("Compute attributions", "Run Integrated Gradients", "Run Integrated Gradients and the deletion test",
               "Run the explainers and the deletion test")
SCANNING = "tokens: scanning"  # the deletion pages' note while their first flips are scanned in the background


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
    return [f for f, link_title, _icon in pages if (ROOT / f).exists()]


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


# ------------------------------------------------------------------------------------------- helpers
def wait_idle(driver, timeout: float = 240) -> None:
    """Until the app has connected, finished its script run and stayed finished for a moment (three readings
    0.3 s apart: a click's rerun starts after a round trip to the server)."""
    deadline, calm, state = time.monotonic() + timeout, 0, None
    while time.monotonic() < deadline:
        state = driver.execute_script(
            "const a = document.querySelector('[data-testid=\"stApp\"]');"
            "return a ? a.getAttribute('data-test-script-state') : null;")
        calm = calm + 1 if state == "notRunning" else 0
        if calm >= 3:
            return
        time.sleep(0.3)
    raise AssertionError(f"the app did not finish running within {timeout} s (state {state!r})")


def wait_drawn(driver, selector: str, timeout: float = 240) -> None:
    """Until an element matching `selector` is on the page and the app is idle: a run that ends early for a rerun
    (a fresh server's first request, pages/_ui/shell.run_through_app) reads "not running" for a moment, which
    wait_idle alone can take for the end."""
    deadline = time.monotonic() + timeout
    while not driver.execute_script("return !!document.querySelector(arguments[0]);", selector):
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing matching {selector!r} within {timeout} s")
        time.sleep(0.3)
    wait_idle(driver, max(1.0, deadline - time.monotonic()))


def page_text(driver, selector: str = "body") -> str:
    """The rendered text of the first element matching `selector` ('' if none), read in the page (one script call;
    WebDriver's own element text walks the DOM from the driver and takes most of a second on a long page)."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", selector)


def settle(driver, least: float = 0.3, timeout: float = 10) -> None:
    """Until the layout has stopped moving after a resize or a tab switch: the sizes of the main area and of every
    chart's drawing read equal three times 0.1 s apart (vega re-renders a chart asynchronously when its container
    changes), and at least `least` seconds."""
    start, last, same = time.monotonic(), None, 0
    while time.monotonic() - start < timeout:
        now = driver.execute_script(
            "const m = document.querySelector('[data-testid=\"stMain\"]');"
            "const r = e => { const b = e.getBoundingClientRect(); return [b.width, b.height].join('x'); };"
            "return [m ? m.scrollHeight : 0, ...[...document.querySelectorAll("
            "'[data-testid=\"stMain\"] [data-testid=\"stVegaLiteChart\"] svg, "
            "[data-testid=\"stMain\"] [data-testid=\"stVegaLiteChart\"] canvas')].map(r)].join(';');")
        same = same + 1 if now == last else 0
        last = now
        if same >= 2 and time.monotonic() - start >= least:
            return
        time.sleep(0.1)


def wait_gone(driver, text: str, timeout: float = 600) -> bool:
    """Until the page shows no `text` (a background stage's note, redrawn by its fragment every few seconds) and
    the app is idle; whether `text` was there at first."""
    deadline = time.monotonic() + timeout
    shown = text in page_text(driver)
    while text in page_text(driver):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} still shown after {timeout} s")
        time.sleep(0.5)
    wait_idle(driver, timeout=max(1, deadline - time.monotonic()))
    return shown


def problems(driver) -> list[str]:
    """Exceptions, error boxes and PROBLEM_TEXT on the page, read in one script call."""
    found = driver.execute_script(
        "const t = id => [...document.querySelectorAll(`[data-testid=\"${id}\"]`)].map(e => e.innerText.slice(0, 300));"
        "return [t('stException'), t('stAlertContentError'), document.body.innerText];")
    exceptions, errors, body = found
    return ([f"exception: {t}" for t in exceptions] + [f"error: {t}" for t in errors]
            + [f"text: {t}" for t in PROBLEM_TEXT if t in body])


def set_number(driver, label: str, value: int) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, f'input[aria-label="{label}"]')
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.ENTER)
    wait_idle(driver)


def options(driver, words=("mask", "scale", "importance")):
    """Checkbox and toggle labels of the main area that mention masking or scaling (by head importance)."""
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


FIND_BUTTON_JS = """
const b = [...document.querySelectorAll('[data-testid="stMain"] button')].find(
  b => b.innerText.trim() === arguments[0] && b.getBoundingClientRect().width > 0);
if (b) b.scrollIntoView({block: 'center'});
return b || null;
"""


def click_run_buttons(driver) -> list[str]:
    from selenium.common.exceptions import StaleElementReferenceException

    clicked = []
    for label in RUN_BUTTONS:
        for _ in range(5):  # a rerun may replace the button between finding and clicking it
            try:
                button = driver.execute_script(FIND_BUTTON_JS, label)
                if button is not None:
                    button.click()
                break
            except StaleElementReferenceException:
                wait_idle(driver)
        else:
            raise AssertionError(f"the button {label!r} kept being replaced")
        if button is not None:
            wait_idle(driver, timeout=300)
            clicked.append(label)
    wait_gone(driver, SCANNING)  # a deletion page's first flips, filled in from the background
    return clicked


def nav_links(driver) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    links = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')
    return {link_title(a): a.get_attribute("href") for a in links}


def link_title(link) -> str:
    return link.text.strip().splitlines()[-1]  # the icon comes first, on its own line


def open_app(driver, url: str) -> None:
    driver.get(url)
    wait_idle(driver)



# ---- layout checks (issue 15): what a reader would see cut, squashed, hidden or overlapping
LAYOUT_JS = r"""
const out = [];
const main = document.querySelector('[data-testid="stMain"]');
const shown = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
// glyph boxes overhang their text a little: 4 px of slack
const inside = (a, b) => a.left >= b.left - 4 && a.right <= b.right + 4
                         && a.top >= b.top - 4 && a.bottom <= b.bottom + 4;
const meet = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1
                       && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
// the content column's right edge: the block container's box less its padding
const column = main.querySelector('[data-testid="stMainBlockContainer"]') || main;
const columnRight = column.getBoundingClientRect().right - parseFloat(getComputedStyle(column).paddingRight);
const visibleText = t => t.textContent.trim() && t.getAttribute('opacity') !== '0' && shown(t);
main.querySelectorAll('[data-testid="stVegaLiteChart"]').forEach((chart, i) => {
  const svg = chart.querySelector('svg.marks');
  if (!svg || !shown(chart)) return;
  const box = svg.getBoundingClientRect();
  const title = svg.querySelector('.role-title-text text');
  const name = `chart ${i} "${title ? title.textContent : ''}"`;
  if (box.width < 250 || box.height < 150) out.push(`${name}: ${Math.round(box.width)} x ${Math.round(box.height)} px`);
  if (box.right > columnRight + 1) out.push(`${name}: runs past the content column`);
  let plot = null;
  svg.querySelectorAll('path.background').forEach(p => {
    if (p.closest('.role-axis, .role-legend, .role-title')) return;
    const r = p.getBoundingClientRect();
    if (!plot || r.width * r.height > plot.width * plot.height) plot = r;
  });
  if (plot && (plot.width < 120 || plot.height < 60))
    out.push(`${name}: plot area squashed to ${Math.round(plot.width)} x ${Math.round(plot.height)} px`);
  svg.querySelectorAll('text').forEach(t => {
    if (!visibleText(t)) return;
    if (!inside(t.getBoundingClientRect(), box)) out.push(`${name}: text "${t.textContent}" outside the chart`);
    if (t.textContent.endsWith('…')) out.push(`${name}: text "${t.textContent}" cut`);
  });
  svg.querySelectorAll('.role-axis').forEach(axis => {
    const labels = [...axis.querySelectorAll('.role-axis-label text')].filter(visibleText);
    const rects = labels.map(t => t.getBoundingClientRect());
    for (let a = 0; a < rects.length; a++) for (let b = a + 1; b < rects.length; b++)
      if (meet(rects[a], rects[b]))
        out.push(`${name}: axis labels "${labels[a].textContent}" and "${labels[b].textContent}" overlap`);
    axis.querySelectorAll('.role-axis-title text').forEach(t => {
      if (rects.some(r => meet(r, t.getBoundingClientRect())))
        out.push(`${name}: axis title "${t.textContent}" overlaps its labels`);
    });
  });
});
main.querySelectorAll('[data-testid="stDataFrame"]').forEach((frame, i) => {
  if (!shown(frame)) return;
  const grid = frame.querySelector('[aria-rowcount]');
  const scroller = frame.querySelector('.dvn-scroller');
  if (!grid || !scroller) return;
  const rows = Number(grid.getAttribute('aria-rowcount')) - 1;
  if (rows > 30) return;
  if (scroller.scrollHeight > scroller.clientHeight + 2)
    out.push(`table ${i} (${rows} rows): rows hidden below a scroll`);
  if (scroller.scrollWidth > scroller.clientWidth + 2) out.push(`table ${i} (${rows} rows): columns cut`);
});
main.querySelectorAll('[data-testid="stMetricValue"] > div').forEach(v => {
  if (v.scrollWidth > v.clientWidth + 1) out.push(`metric "${v.textContent}" cut`);
});
// a widget's label that Streamlit ends with an ellipsis (CSS text-overflow) because its column is too narrow
main.querySelectorAll('[data-testid="stWidgetLabel"] *, [data-testid="stCheckbox"] label *').forEach(e => {
  if (!shown(e) || getComputedStyle(e).textOverflow !== 'ellipsis') return;
  if (e.scrollWidth > e.clientWidth + 1) out.push(`label "${e.textContent.trim()}" cut`);
});
return out;
"""


def layout_problems(driver) -> list[str]:
    """Charts under 250 x 150 px or with a squashed plot area, chart text outside the chart, cut ('…') or
    overlapping axis labels, tables of up to 30 rows with hidden rows or columns, cut metric values and widget
    labels."""
    return driver.execute_script(LAYOUT_JS)


def visible_tabs(driver) -> list:
    from selenium.webdriver.common.by import By

    return [t for t in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] [role="tab"]')
            if t.is_displayed()]


def full_page_screenshot(driver, path, width: int, height: int = 1400, limit: int = 9000) -> None:
    """The whole page: the window grown to the main area's height for the shot, then back to `height`. Only when a
    person will read it ($LONGVIZ_SCREENSHOTS or $LONGVIZ_UPDATE_SCREENSHOT set): a shot asserts nothing, and
    growing the window, letting the charts re-layout and encoding a page-long PNG took seconds a shot in CI."""
    if not (os.environ.get("LONGVIZ_SCREENSHOTS") or os.environ.get("LONGVIZ_UPDATE_SCREENSHOT") == "1"):
        return
    tall = driver.execute_script(
        'const m = document.querySelector(\'[data-testid="stMain"]\'); return m ? m.scrollHeight : 0;')
    driver.set_window_size(width, min(max(height, int(tall) + 80), limit))
    settle(driver)  # charts re-layout to the new viewport
    driver.save_screenshot(str(path))
    driver.set_window_size(width, height)
