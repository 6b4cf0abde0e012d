"""Time to a demo prediction in a real browser: the first start on an empty cache (the demo is built, with its
progress bar) and later visits (issue 2 asks for <= 3 minutes and <= 10 s).

    python benchmarks/first_load.py [--cache DIR] [--visits 3]

Starts `streamlit run app.py` on loopback with LONGVIZ_CACHE_DIR pointing at an empty directory (a temporary
one unless --cache is given), opens it in Debian's headless Chromium and measures, from the moment the page is
requested, when the demo build's progress bar first shows and when the document page shows its "Predicted"
metric. Then it opens the app again in new tabs (new Streamlit sessions, same server) and, last, restarts the
server on the now-filled cache (a later `streamlit run`) and times one more visit.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.browser import CHROMEDRIVER, CHROMIUM, chromium  # noqa: E402
from support.servers import serve  # noqa: E402


def _visit(driver, url: str, timeout: float = 600) -> tuple[float | None, float]:
    """Seconds until the build's progress bar first shows (None if it never does) and until "Predicted"."""
    from selenium.webdriver.common.by import By

    start = time.monotonic()
    driver.get(url)
    progress_seen = None
    while time.monotonic() - start < timeout:
        if progress_seen is None and driver.find_elements(By.CSS_SELECTOR, '[data-testid="stProgress"]'):
            progress_seen = time.monotonic() - start
        labels = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]')
        if any(label.text.strip() == "Predicted" for label in labels):
            return progress_seen, time.monotonic() - start
        if "Traceback" in driver.find_element(By.TAG_NAME, "body").text:
            raise RuntimeError("the page shows a traceback")
        time.sleep(0.2)
    raise TimeoutError(f"no prediction within {timeout} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, help="an empty cache directory (default: a temporary one)")
    ap.add_argument("--visits", type=int, default=3, help="later visits in new tabs")
    args = ap.parse_args()
    if not (CHROMIUM and CHROMEDRIVER):
        sys.exit("needs Debian's chromium and chromium-driver")
    tmp = Path(tempfile.mkdtemp(prefix="longviz-first-load-"))
    cache = args.cache or tmp / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if any(cache.iterdir()):
        sys.exit(f"{cache} is not empty: the first visit would not build the demo")
    env = dict(os.environ, LONGVIZ_CACHE_DIR=str(cache))
    env.pop("LONGVIZ_CONFIG", None)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at start; cache {cache}", flush=True)

    t0 = time.monotonic()
    proc, port = serve(ROOT / "app.py", env, tmp / "server.log")
    print(f"server accepting connections after {time.monotonic() - t0:.1f} s", flush=True)
    driver = chromium(tmp / "profile")
    url = f"http://127.0.0.1:{port}/"
    try:
        progress, shown = _visit(driver, url)
        print(f"first visit (demo built): progress bar after {progress if progress is None else round(progress, 1)} s, "
              f"prediction after {shown:.1f} s", flush=True)
        for i in range(args.visits):
            driver.switch_to.new_window("tab")
            print(f"later visit {i + 1} (new session): prediction after {_visit(driver, url)[1]:.1f} s", flush=True)
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(30)

    proc, port = serve(ROOT / "app.py", env, tmp / "server2.log")
    driver = chromium(tmp / "profile2")
    try:
        print(f"after a server restart (model loaded from the cache): prediction after "
              f"{_visit(driver, f'http://127.0.0.1:{port}/')[1]:.1f} s", flush=True)
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(30)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main()
