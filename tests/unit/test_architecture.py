"""The core's shape, drawn from its import statements (every one, at module level or inside a function): no
import cycles, no module importing a layer above its own, no private name taken from another module, Streamlit
only in cache.py; and no cycle among the page helpers. A failure lists the offending edges."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = "longviz_core"

# Lowest first. A module may import modules of its own layer and of the layers it lists, never any other.
# evaluation runs the model again over views' inputs (deletion test, head importance); dataset combines both.
# figures render what views compute (types, labels) and sit beside dataset: neither imports the other, and no
# computation imports a renderer. The front door, the Streamlit caches, the command line, the exports for
# downloads and the notebook displays are the top: they may use anything.
LAYERS: dict[str, set[str]] = {
    "base": {"errors", "progress", "_disk", "tokens", "config", "runtime", "_version"},
    "demo": {"demo"},
    "model": {"model"},
    "attribution": {"attribution"},
    "views": {"views"},
    "evaluation": {"evaluation"},
    "figures": {"figures"},
    "dataset": {"dataset"},
    "top": {"__init__", "__main__", "cache", "cli", "export", "notebook"},
}
MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),
    "demo": {"base"},
    "model": {"base", "demo"},
    "attribution": {"base", "demo", "model"},
    "views": {"base", "demo", "model", "attribution"},
    "evaluation": {"base", "demo", "model", "attribution", "views"},
    "figures": {"base", "views"},
    "dataset": {"base", "demo", "model", "attribution", "views", "evaluation"},
    "top": set(LAYERS),
}
# Siblings never import each other (each takes vectors; the dataset layer combines them).
SIBLINGS = [("views.agreement", "evaluation.faithfulness")]


def _modules(package_dir: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py below package_dir (a package is named by its __init__)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None, int]]:
    """(imported module, name taken from it or None, line) for every import of a module in `modules`."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:  # a submodule
                    found.append((f"{base}.{alias.name}", None, node.lineno))
                elif base in modules:
                    found.append((base, alias.name, node.lineno))
    return found


def _graph(package_dir: Path, package: str) -> tuple[dict[str, Path], dict[str, set[str]], list]:
    modules = _modules(package_dir, package)
    edges, imports = {m: set() for m in modules}, []
    for name, path in modules.items():
        for target, what, line in _imports(name, path, modules):
            imports.append((name, target, what, line))
            if target != name:
                edges[name].add(target)
    return modules, edges, imports


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _layer(module: str) -> str:
    first = module.split(".")[1] if "." in module else "__init__"
    return next(layer for layer, members in LAYERS.items() if first in members)


CORE_MODULES, CORE_EDGES, CORE_IMPORTS = _graph(ROOT / CORE, CORE)


def test_every_core_module_has_a_layer():
    unplaced = []
    for m in CORE_MODULES:
        try:
            _layer(m)
        except StopIteration:
            unplaced.append(m)
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"


def test_the_core_has_no_import_cycle():
    cycle = _cycle(CORE_EDGES)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_a_layer_above_its_own():
    upward = [f"{a} -> {b} ({_layer(a)} may not import {_layer(b)})"
              for a, targets in sorted(CORE_EDGES.items()) for b in sorted(targets)
              if _layer(b) != _layer(a) and _layer(b) not in MAY_IMPORT[_layer(a)]]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_sibling_views_do_not_import_each_other():
    crossed = [f"{a} -> {b}" for x, y in SIBLINGS for a, b in ((x, y), (y, x))
               if f"{CORE}.{b}" in CORE_EDGES[f"{CORE}.{a}"]]
    assert not crossed, crossed


def test_no_private_name_crosses_modules():
    private = [f"{a}:{line} takes {what} from {b}" for a, b, what, line in CORE_IMPORTS
               if what and what.startswith("_") and not (what.startswith("__") and what.endswith("__")) and a != b]
    assert not private, "private names used outside their module:\n" + "\n".join(private)


def test_streamlit_only_in_the_cache_module():
    users = []
    for name, path in CORE_MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            roots = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(r.split(".")[0] in ("streamlit", "pages") for r in roots) and name != f"{CORE}.cache":
                users.append(f"{name}:{node.lineno}")
    assert not users, f"the core imports streamlit or the pages outside cache.py: {users}"


def test_the_checker_sees_cycles_and_upward_edges():
    """The checks above can fail: a made-up graph with a cycle and an upward edge is caught."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert _layer(f"{CORE}.views.agreement") == "views" and "dataset" not in MAY_IMPORT["views"]
    # the real graph holds the edges this test relies on seeing (relative imports, `from . import module`)
    assert f"{CORE}.dataset.aggregate" in CORE_EDGES[f"{CORE}.dataset.kinds.agreement"]
    assert f"{CORE}.model._kernels" in CORE_EDGES[f"{CORE}.model.bands"]
    assert f"{CORE}.views.masking" in CORE_EDGES[f"{CORE}.views.agreement"]


def test_the_page_helpers_have_no_import_cycle():
    modules = _modules(ROOT / "pages", "pages")
    edges = {m: set() for m in modules}
    for name, path in modules.items():
        for target, _, _ in _imports(name, path, modules):
            if target != name and target != "pages":
                edges[name].add(target)
    cycle = _cycle(edges)
    assert cycle is None, "import cycle among the pages: " + " -> ".join(cycle)
