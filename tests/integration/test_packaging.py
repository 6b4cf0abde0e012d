"""pyproject.toml describes the package the README installs: the same dependencies as requirements.txt, a
`longviz` script that resolves, the stopword list shipped as package data, and one command line for `longviz`
and `python -m longviz_core`."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from longviz_core import cli

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
COMMANDS = ("app", "demo", "precompute", "store-info", "prune-stores", "leaderboard")
# requirements.txt installs the test tools too (README's second command runs the tests; nbclient, ipykernel and
# nbformat execute the example notebook); the package puts them
# in [dev], and Ray in [ray].
EXTRAS_ONLY = {"pytest", "pytest-xdist", "selenium", "hypothesis", "ray", "nbclient", "ipykernel", "nbformat"}


def _requirements_txt() -> dict[str, Requirement]:
    lines = (ln.split("#")[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines())
    return {canonicalize_name(r.name): r for r in map(Requirement, filter(None, lines))}


def _by_name(specs: list[str]) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in map(Requirement, specs)}


def test_dependencies_are_requirements_txt_without_the_test_tools():
    pinned, deps = _requirements_txt(), _by_name(PROJECT["dependencies"])
    assert set(deps) == set(pinned) - EXTRAS_ONLY
    for name, req in deps.items():
        if name == "torch":  # requirements.txt pins the tested CPU wheel; the package accepts it and later ones
            (pin,) = pinned[name].specifier
            assert pin.operator == "==" and req.specifier.contains(pin.version)
        else:
            assert req.specifier == pinned[name].specifier, name
            assert req.extras == pinned[name].extras, name
    assert "rbo" not in deps and "rbo" not in pinned  # its metadata pins numpy<2: installed with --no-deps


def test_extras_hold_ray_and_the_test_tools():
    pinned, extras = _requirements_txt(), PROJECT["optional-dependencies"]
    ray, dev = _by_name(extras["ray"]), _by_name(extras["dev"])
    assert set(ray) == {"ray"} and ray["ray"].specifier == pinned["ray"].specifier
    assert EXTRAS_ONLY - {"ray"} <= set(dev) and "ruff" in dev
    for name in EXTRAS_ONLY - {"ray"}:
        assert dev[name].specifier == pinned[name].specifier, name
    assert dev["longviz"].extras == {"ray"}  # the whole suite, Ray tests included


def test_the_console_script_resolves_to_the_cli_main():
    module, _, attr = PROJECT["scripts"]["longviz"].partition(":")
    main = getattr(importlib.import_module(module), attr)
    assert callable(main) and main is cli.main


def test_python_m_lists_every_command_on_one_line():
    out = subprocess.run([sys.executable, "-m", "longviz_core", "--help"], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "COLUMNS": "80"}).stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("    ")}
    assert set(lines) == set(COMMANDS)
    for name in COMMANDS:  # the name and its help on the same line
        assert len(lines[name].split()) > 2, lines[name]


def test_the_app_command_says_it_needs_a_clone(tmp_path, capsys):
    assert cli.app_script() == ROOT / "app.py"
    with pytest.raises(cli.LongvizError, match="needs a clone"):
        cli.app_script(tmp_path)
    (tmp_path / "app.py").write_text("")
    with pytest.raises(cli.LongvizError, match="needs a clone"):  # app.py without its pages/ is not the app
        cli.app_script(tmp_path)


def test_package_data_declares_every_file_that_is_not_python():
    """The stopword list and the shipped demo model, and whatever is added beside them."""
    package = ROOT / "longviz_core"
    shipped = {p for p in package.rglob("*")
               if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    demos = {package / "demo" / "shipped" / family / "metrics.json" for family in ("longformer", "modernbert", "decoder")}
    assert {package / "data" / "stopwords" / "english", *demos} <= shipped
    declared = {p for pattern in PYPROJECT["tool"]["setuptools"]["package-data"]["longviz_core"]
                for p in package.glob(pattern) if p.is_file()}
    assert shipped <= declared


def test_the_built_wheel_holds_the_stopwords_and_no_app(tmp_path):
    """A real build (setuptools, no network) of a copy of the sources: the wheel has every file of the package
    and its data, the script, the version and the dependencies, and none of the app, the tests or the docs."""
    from longviz_core._version import __version__

    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("pyproject's license expression needs setuptools >= 77 (pip's isolated build fetches it)")
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "longviz_core", src / "longviz_core", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist")], cwd=src, check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("longviz-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    shipped = {f"longviz_core/{p.relative_to(ROOT / 'longviz_core').as_posix()}"
               for p in (ROOT / "longviz_core").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert "longviz_core/data/stopwords/english" in shipped and shipped <= names  # the shipped demo included
    assert {n.split("/")[0] for n in names} == {"longviz_core", info}
    assert "longviz = longviz_core.cli:main" in entry_points
    assert f"\nVersion: {__version__}\n" in metadata
    requires = {canonicalize_name(Requirement(ln.split(": ", 1)[1]).name)
                for ln in metadata.splitlines() if ln.startswith("Requires-Dist: ")}
    assert requires == set(_by_name(PROJECT["dependencies"])) | {"ray", "longviz", "pytest", "pytest-xdist",
                                                                 "selenium", "hypothesis", "ruff", "nbclient",
                                                                 "ipykernel", "nbformat"}
