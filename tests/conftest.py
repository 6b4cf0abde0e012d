"""Shared fixtures: the demo (built once per test session) and tiny models built from configs."""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# Tests never touch the user's cache: a project-local one (ignored by git) unless CI names another.
os.environ.setdefault("LONGVIZ_CACHE_DIR", str(ROOT / ".longviz-cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker per core and one more: one thread each, rather than many fighting
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_threads, "1")

from streamlit.components.v2 import manifest_scanner  # noqa: E402

from support.channels import strict as strict_channels  # noqa: E402
from support.guards import Matrix  # noqa: E402
from tiny import make_tiny_bert, make_tiny_longformer  # noqa: E402

# Every new AppTest scans each installed distribution's metadata for Streamlit components at its first run (0.22 s
# of CPU; 43 s of the suite's, py-spy). The installed packages do not change during a run: scan once a process.
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
strict_channels()  # every chart the tests draw passes channel objects (tests/support/channels.py says why)

_MATRIX = Matrix()  # the reliability matrix (tests/reliability/conftest.py marks each case's reports)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core and one more (xdist's own count where PYTEST_XDIST_AUTO_NUM_WORKERS is set).
    Much of the suite waits rather than computes (a browser drawing, a Streamlit server, a subprocess importing
    torch): on the 2-core machine two workers left the CPU 11 % idle and the suite took 1,033 s, three left 8 %
    and took 899 s, every test passing (docs/development.md, "Fourth round")."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(trylast=True)  # after `-m`'s deselection: the shares are those of the tests that run
def pytest_collection_modifyitems(items):
    """Each module's tests together and in order; the modules holding a test marked `slow` or `browser` at the
    head of the workers' first shares, so that the minutes-long tests start early and on different workers.

    xdist's `worksteal` first hands each of the W workers a contiguous share of the collection (the first
    len // W tests, then half of the rest, ...), and a worker that runs out takes the last half of the longest
    queue. With every slow module first, one share held them all: the others took its fast tail but not its
    head, and that worker ran the browser module (one server and one Chromium a worker, 452 s) and the links and
    pages' slow tests alone for the suite's last minute. Here the browser modules head one share and the other
    slow modules are dealt to the other shares in turn (the most slow tests first); the fast tests fill every
    share to the size xdist sends it and are what the idle workers take."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.module.__name__, []).append(item)

    def marked(name: str, marker: str) -> int:
        return sum(1 for item in modules[name] if item.get_closest_marker(marker))

    browser = [m for m in modules if marked(m, "browser")]
    slow = sorted((m for m in modules if m not in browser and marked(m, "slow")), key=lambda m: -marked(m, "slow"))
    fast = [item for m in modules if m not in browser and m not in slow for item in modules[m]]
    heads: list[list] = [[] for _ in range(max(1, workers))]
    heads[0] = [item for m in browser for item in modules[m]]
    for i, m in enumerate(slow):  # dealt to the shares after the browser's (to every share with one worker)
        heads[1 + i % (workers - 1) if workers > 1 else 0] += modules[m]
    sizes, left = [], len(items)
    for i in range(len(heads)):  # the share sizes xdist sends: each idle worker the pending tests // those left
        sizes.append(left // (len(heads) - i))
        left -= sizes[-1]
    if any(len(head) > size for head, size in zip(heads, sizes)):  # a head larger than its share: slow ones first
        items[:] = [item for head in heads for item in head] + fast
        return
    order = []
    for head, size in zip(heads, sizes):
        order += head + fast[: size - len(head)]
        del fast[: size - len(head)]
    items[:] = order + fast


def pytest_runtest_logreport(report):
    _MATRIX.add(report)


def pytest_terminal_summary(terminalreporter):
    line = _MATRIX.line()
    if line:
        terminalreporter.write_sep("=", "reliability matrix")
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def demo():
    from longviz_core.demo import ensure_demo

    return ensure_demo()


@pytest.fixture(scope="session")
def demo_model(demo):
    from longviz_core import load_model

    return load_model("demo")


@pytest.fixture(scope="session")
def demo_dataset(demo_model):
    from longviz_core import load_dataset

    return load_dataset("demo", id2label=demo_model.id2label)


@pytest.fixture(scope="session")
def tiny_longformer_dir(tmp_path_factory):
    return make_tiny_longformer(tmp_path_factory.mktemp("tiny_longformer"))


@pytest.fixture(scope="session")
def tiny_longformer(tiny_longformer_dir):
    from longviz_core import load_model

    return load_model(str(tiny_longformer_dir))


@pytest.fixture(scope="session", params=[(16, 8), (8, 16, 32)], ids=lambda w: "windows-" + "-".join(map(str, w)))
def layered_longformer(request, tmp_path_factory):
    """Tiny Longformers with a different attention window per layer (full windows 16, 8 / 8, 16, 32); large
    random weights (init 0.3) so attention is peaked and F(x) - F(baseline) is far from 0 for IG."""
    from longviz_core import load_model

    windows = list(request.param)
    path = make_tiny_longformer(tmp_path_factory.mktemp("layered"), layers=len(windows), window=windows,
                                initializer_range=0.3, seed=5)
    return load_model(str(path), device="cpu")


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    from longviz_core import load_model

    return load_model(str(make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))))


# ---- a served app and a headless browser (e2e and link tests)
# One server and one Chromium per worker, shared by every module that asks: each start imports torch and
# transformers and loads the demos again (a server's start and first page cost about 20 s of CPU).
class ServerLog:
    """The shared server's log from where one test began: what that test's requests wrote."""

    def __init__(self, path: Path) -> None:
        self.path, self.start = path, path.stat().st_size

    def read_text(self) -> str:
        with self.path.open("rb") as f:
            f.seek(self.start)
            return f.read().decode(errors="replace")


@pytest.fixture(scope="session")
def _served_app(demo, tmp_path_factory):
    from support.browser import require_browser
    from support.servers import ROOT, leave_first_request, serve

    require_browser()
    tmp = tmp_path_factory.mktemp("e2e")
    env = dict(os.environ)
    env.pop("LONGVIZ_CONFIG", None)
    log = tmp / "server.log"
    proc, port = serve(ROOT / "app.py", env, log)
    leave_first_request(port)
    yield f"http://127.0.0.1:{port}", log
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def app_server(_served_app):
    """(base URL, the server's log since this test began)."""
    base, log = _served_app
    return base, ServerLog(log)


@pytest.fixture(scope="session")
def browser(_served_app, tmp_path_factory):
    from support.browser import chromium

    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()
