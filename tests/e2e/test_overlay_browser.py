"""The attribution overlay in a real browser (issue 15): a click on a token selects it (number box, address bar,
outline), and a position chosen elsewhere far down the document (number box, link, a click on a table row or on
a passage of the document map's strip) scrolls into view inside the overlay's own box. Screenshots at 1,440 and 1,024 px after the click go to $LONGVIZ_SCREENSHOTS when it is set.
The navigation's icons draw without a network or an emoji font."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from support.browser import click_run_buttons, full_page_screenshot, problems, set_number, wait_idle

pytestmark = pytest.mark.browser

MAX_TOKENS = 512  # long enough to scroll in the overlay's box, quick for IG on a CPU
LABEL = "Token position (or click a token or a table row)"
HOST = '[data-testid="stBidiComponentIsolated"]'  # the component's shadow host (components v2, no iframe)
GRID_ROW_PX = 35  # st.dataframe's row height (header included)
# the token's and the box's rectangles, in the viewport
RECTS_JS = """
const box = document.querySelector(arguments[0]).shadowRoot.querySelector('.lv-box');
const el = box.querySelector(`[data-pos="${arguments[1]}"]`);
const r = el.getBoundingClientRect(), b = box.getBoundingClientRect();
return {token: [r.top, r.bottom], box: [b.top, b.bottom], scrolled: box.scrollTop, height: b.height};
"""


def _overlay(driver):
    from selenium.webdriver.support.ui import WebDriverWait

    host = WebDriverWait(driver, 30).until(lambda d: d.find_elements("css selector", HOST))[0]
    return host.shadow_root


def _rects(driver, pos: int) -> dict:
    """RECTS_JS for the token at `pos`, once the overlay is drawn (a new page's component mounts after the script
    run ends)."""
    from selenium.webdriver.support.ui import WebDriverWait

    drawn = ("const h = document.querySelector(arguments[0]);"
             "return !!(h && h.shadowRoot && h.shadowRoot.querySelector(`.lv-box [data-pos=\"${arguments[1]}\"]`));")
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(drawn, HOST, pos))
    return driver.execute_script(RECTS_JS, HOST, pos)


def _selected(driver) -> list[str]:
    return [e.get_attribute("data-pos") for e in _overlay(driver).find_elements("css selector", ".lv-sel")]


def _number(driver) -> str:
    return driver.find_element("css selector", f'input[aria-label="{LABEL}"]').get_attribute("value")


def _attribution_after_ig(driver, base: str) -> None:
    """The Attribution page at MAX_TOKENS at 1,440 px, its IG run (or read from the disk cache) and drawn."""
    driver.set_window_size(1440, 1400)
    driver.get(f"{base}/attribution?max_tokens={MAX_TOKENS}")
    wait_idle(driver)
    click_run_buttons(driver)
    assert not problems(driver), problems(driver)


def test_click_selects_and_selection_scrolls_into_view(app_server, browser):
    base, log = app_server
    _attribution_after_ig(browser, base)
    shown = _selected(browser)
    assert len(shown) == 1 and _number(browser) == shown[0]  # the top token, outlined

    chosen = next(str(p) for p in range(20, 40) if str(p) != shown[0])  # near the top: visible without scrolling
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});",
                           browser.find_element("css selector", HOST))
    _overlay(browser).find_element("css selector", f'[data-pos="{chosen}"]').click()
    wait_idle(browser)
    assert _number(browser) == chosen and f"token={chosen}" in browser.current_url
    assert _selected(browser) == [chosen]
    folder = os.environ.get("LONGVIZ_SCREENSHOTS")
    if folder:
        for width in (1440, 1024):
            full_page_screenshot(browser, Path(folder) / f"attribution-click-{width}.png", width)
        browser.set_window_size(1440, 1400)

    far = MAX_TOKENS - 3  # the last text token: below the box's fold
    before = _rects(browser, far)
    assert before["token"][0] > before["box"][1] and before["height"] <= 481  # hidden below, box ~480 px
    set_number(browser, LABEL, far)
    wait_idle(browser)
    after = _rects(browser, far)
    assert _selected(browser) == [str(far)] and f"token={far}" in browser.current_url
    assert after["box"][0] <= after["token"][0] and after["token"][1] <= after["box"][1], after
    assert after["scrolled"] > 0 and not problems(browser)

    linked = far - 40  # a link's token: in view when the page opens
    browser.get(f"{base}/attribution?max_tokens={MAX_TOKENS}&token={linked}")
    wait_idle(browser)
    opened = _rects(browser, linked)
    assert _number(browser) == str(linked) and _selected(browser) == [str(linked)]
    assert opened["box"][0] <= opened["token"][0] and opened["token"][1] <= opened["box"][1], opened

    row = 2  # the third row of "top 10 negative": a click on its row marker picks that row's token
    picked = _click_table_row(browser, table=1, row=row)
    wait_idle(browser)
    assert picked != str(linked) and _number(browser) == picked and f"token={picked}" in browser.current_url
    assert _selected(browser) == [picked]
    shown = _rects(browser, int(picked))
    assert shown["box"][0] <= shown["token"][0] and shown["token"][1] <= shown["box"][1], shown
    assert not problems(browser) and "Traceback" not in log.read_text()


# the document map's strip (the rect mark with one rectangle per passage, in passage order) in the chart titled
# "Document map…", scrolled into view: its rectangles (SVG paths)
STRIP_JS = """
const chart = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stVegaLiteChart"]')].find(
  c => [...c.querySelectorAll('svg.marks .role-title-text text')].some(t => t.textContent.startsWith('Document map')));
if (!chart) return null;
chart.scrollIntoView({block: 'center'});
const groups = [...chart.querySelectorAll('svg.marks g.mark-rect')].map(g => [...g.querySelectorAll('path')]);
return groups.reduce((a, b) => (b.length > a.length ? b : a), []);
"""


def test_a_click_on_the_document_maps_strip_selects_its_passage(app_server, browser, demo_model, demo_dataset):
    """The strip above the overlay: a click on a passage's rectangle selects the passage's first token, as
    lv.segment computes the sentences here (number box, address bar, outline, scrolled into view in the box)."""
    import longviz_core as lv
    from selenium.webdriver.common.action_chains import ActionChains

    base, log = app_server
    _attribution_after_ig(browser, base)
    analysis = lv.analyze(demo_model, demo_dataset["text"].iloc[0], MAX_TOKENS)
    starts = [a for a, _ in lv.segment(analysis, "sentence").spans]  # the map's passages: the page's sentences
    rects = browser.execute_script(STRIP_JS)
    assert rects is not None and len(rects) == len(starts), (rects and len(rects), len(starts))
    before = _number(browser)
    # a late passage, wide enough to click, not the one already selected
    k = next(i for i in range(len(starts) - 1, 0, -1) if str(starts[i]) != before and rects[i].rect["width"] >= 4)
    ActionChains(browser).move_to_element(rects[k]).click().perform()
    wait_idle(browser)
    chosen = str(starts[k])
    assert _number(browser) == chosen and f"token={chosen}" in browser.current_url, (_number(browser), chosen)
    assert _selected(browser) == [chosen]
    shown = _rects(browser, starts[k])
    assert shown["box"][0] <= shown["token"][0] and shown["token"][1] <= shown["box"][1], shown
    assert not problems(browser) and "Traceback" not in log.read_text()


def _click_table_row(driver, table: int, row: int) -> str:
    """Click the row marker (the checkbox column) of a row of the main area's `table`-th data grid, drawn on a
    canvas, and return that row's token position as the grid's accessibility table lists it."""
    from selenium.webdriver.common.action_chains import ActionChains

    frame = driver.find_elements("css selector", '[data-testid="stMain"] [data-testid="stDataFrame"]')[table]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", frame)
    deadline = time.monotonic() + 30  # the grid draws its accessible table a moment after it scrolls into view
    while not driver.execute_script("return !!arguments[0].querySelector('[aria-rowcount]');", frame):
        assert time.monotonic() < deadline, "the table's grid was not drawn"
        time.sleep(0.2)
    cells = driver.execute_script("""
        const grid = arguments[0].querySelector('[aria-rowcount]');
        const text = tr => [...tr.querySelectorAll('th, td')].map(c => c.textContent.trim());
        return {head: text(grid.querySelector('[aria-rowindex="1"]')),
                row: text(grid.querySelector(`[aria-rowindex="${arguments[1] + 2}"]`))};""", frame, row)
    position = cells["row"][cells["head"].index("position")]
    canvas = frame.find_element("css selector", "canvas")
    size = canvas.size
    x, y = 12, GRID_ROW_PX * (row + 1) + GRID_ROW_PX // 2  # header row first, then `row` rows above it
    ActionChains(driver).move_to_element_with_offset(canvas, x - size["width"] // 2,
                                                     y - size["height"] // 2).click().perform()
    return position


def test_navigation_icons_render_offline(app_server, browser):
    """The navigation's icons are Material Symbols from Streamlit's own static files (the browser here has no
    network and no emoji font): every link has one, drawn in that font, and the font has loaded."""
    base, _ = app_server
    browser.get(base)
    wait_idle(browser)
    icons = browser.execute_script(
        "return [...document.querySelectorAll('[data-testid=stSidebarNav] a')].map(a => {"
        "const i = a.querySelector('[data-testid=stIconMaterial]');"
        "return i ? [i.textContent, getComputedStyle(i).fontFamily] : null; });")
    assert icons and all(i and "Material Symbols" in i[1] for i in icons), icons
    assert browser.execute_script("return document.fonts.check('16px \"Material Symbols Rounded\"')")
    assert browser.execute_script(
        "return [...document.fonts].some(f => f.family.includes('Material Symbols') && f.status === 'loaded')")
