"""The import graph of bakery/ and scripts/: no circles, and a pipeline that names no stage.

Read from the source with ``ast`` (nothing is imported): every ``import`` counts, also one
inside a function, since a lazy import is still a dependency and a lazy circle still
breaks a module that is imported first from the other end. ``bakery/stages/builtin.py``
imports every stage package by name at run time; the graph gives it those edges.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = REPO / "bakery" / "stages"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of bakery/ and scripts/."""
    found = {}
    for top in ("bakery", "scripts"):
        for path in sorted((REPO / top).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _stage_packages() -> list[str]:
    return sorted(f"bakery.stages.{p.name}" for p in STAGES.iterdir() if (p / "__init__.py").is_file())


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or the closest enclosing module of ours (``bakery.x.y.attr`` -> ``bakery.x.y``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(_known(a.name, modules) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..y import z
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:  # `from pkg import module` imports the module
                found.add(_known(f"{base}.{a.name}", modules))
    found.discard(None)
    found.discard(name)
    return found


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    graph["bakery.stages.builtin"] |= set(_stage_packages())
    return {name: frozenset(deps) for name, deps in graph.items()}


def circles(graph: dict[str, frozenset[str]] | dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read_in_full():
    graph = import_graph()
    assert {"bakery.pipeline.config", "bakery.stages.ntc.stage", "scripts.make_assets"} <= set(graph)
    assert "bakery.pipeline.safety" in graph["bakery.pipeline.config"]           # a module-level import
    assert "bakery.device" in graph["bakery.pipeline.planner"]                   # a lazy one
    assert "bakery.stages.ntc" in graph["bakery.stages.builtin"]                 # discovery
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_the_pipeline_names_no_stage():
    """bakery/pipeline/ reaches stages only through the registry and the stage contract
    (``bakery.stages``, ``.base``, ``.params``); what a stage needs of it is a hook."""
    stages = [*_stage_packages(), "bakery.stages.builtin"]
    named = {(name, dep) for name, deps in import_graph().items() if name.startswith("bakery.pipeline.")
             for dep in deps if any(dep == s or dep.startswith(s + ".") for s in stages)}
    assert named == set()
    assert "bakery.stages.fit.spec" in import_graph()["bakery.stages.fit.stage"]  # the check can see a stage



def _imported_at_load(tree: ast.AST) -> set[str]:
    """Top-level packages a module imports when it loads: its statements, also under
    if/try/with and class bodies, but not inside functions."""
    found, scopes = set(), [tree]
    while scopes:
        for node in ast.iter_child_nodes(scopes.pop()):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found.add((node.module or "").split(".")[0])
            else:
                scopes.append(node)
    return found


def test_formats_and_nn_load_without_a_gpu_stack():
    """No module of bakery/formats/ or bakery/nn/ imports slangpy when it loads (engine
    scripts read bundles with numpy alone); a function that takes a device may."""
    snippet = "import numpy\ntry:\n    import slangpy as spy\nexcept ImportError:\n    pass\ndef f():\n    import torch\n"
    assert _imported_at_load(ast.parse(snippet)) == {"numpy", "slangpy"}
    at_load = [name for name, path in _modules().items() if name.startswith(("bakery.formats", "bakery.nn"))
               and "slangpy" in _imported_at_load(ast.parse(path.read_text(encoding="utf-8")))]
    assert at_load == []
