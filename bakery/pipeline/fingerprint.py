"""A stage's code fingerprint for cache keys: every file that can shape its output.

Starting from the stage's own package, it follows Python imports of ``bakery`` modules
and, from those and from every Slang file found, the ``#include``/``import`` lines of
Slang, to a closure; the fingerprint hashes the text of all of it. No list is kept by
hand, so editing any included Slang file or any Python that generates Slang rebuilds
exactly the bakes it feeds. The orchestration (``bakery.pipeline``, the CLI) is left
out: it places outputs but never shapes them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
import sys
from pathlib import Path
from typing import Iterator

PACKAGE = "bakery"
#: Modules that orchestrate bakes but never shape a bundle's bytes.
_NOT_CODE = ("bakery.pipeline", "bakery.cli", "bakery.__main__")
#: Every stage writes through the bundle writer, so its code shapes every bundle.
_ALWAYS = ("formats/bundle.py",)
_SLANG_INCLUDE = re.compile(r'#include\s+"([^"]+)"')
_SLANG_IMPORT = re.compile(r"^\s*(?:__include|import)\s+([A-Za-z_][\w.]*)\s*;", re.M)


def package_root() -> Path:
    """The ``bakery`` package folder: also the Slang include path."""
    return Path(__file__).resolve().parent.parent


def _module_file(name: str, root: Path) -> Path | None:
    rel = Path(*name.split(".")[1:])
    for cand in (root / rel / "__init__.py", (root / rel).with_suffix(".py")):
        if cand.is_file():
            return cand
    return None


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [PACKAGE, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _python_imports(path: Path, root: Path) -> list[str]:
    """``bakery`` modules imported by ``path`` (absolute and relative imports alike)."""
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    return list(_imported_modules(path.read_bytes(), package))


@functools.lru_cache(maxsize=None)
def _imported_modules(source: bytes, package: str) -> tuple[str, ...]:
    """The ``bakery`` modules a module of ``package`` with this source imports. Parsing is
    most of a re-bake's planning and the stages share most of their files, so each text is
    parsed once per process (keyed by the text itself: an edited file is parsed again)."""
    found = []
    for node in _statements(ast.parse(source).body):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append(base)
            found += [f"{base}.{a.name}" for a in node.names]  # `from pkg import module`
    return tuple(m for m in found if m == PACKAGE or m.startswith(PACKAGE + "."))


def _statements(body: list) -> Iterator[ast.AST]:
    """Every statement of ``body``, nested ones too (a lazy import inside a function
    counts): imports are statements, so the expressions, most of a tree, are skipped."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, field, None) or [])


def _slang_references(text: str, path: Path, root: Path) -> list[Path]:
    refs = []
    for inc in _SLANG_INCLUDE.findall(text):
        for base in (root, path.parent):
            if (base / inc).is_file():
                refs.append((base / inc).resolve())
                break
    if path.suffix == ".slang":
        for mod in _SLANG_IMPORT.findall(text):
            cand = root / (mod.replace(".", "/") + ".slang")
            if cand.is_file():
                refs.append(cand.resolve())
    return refs


def code_closure(start: Path, root: Path | None = None) -> list[Path]:
    """Every Python and Slang file below ``root`` that ``start`` (a folder or a file)
    reaches through imports and includes, sorted."""
    root = (root or package_root()).resolve()
    start = start.resolve()
    todo = sorted(start.rglob("*.py")) + sorted(start.rglob("*.slang")) if start.is_dir() else [start]
    todo += [root / p for p in _ALWAYS]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        todo += _slang_references(text, path, root)
        if path.suffix == ".py" and root in path.parents:
            for mod in _python_imports(path, root):
                if mod.startswith(_NOT_CODE):
                    continue
                f = _module_file(mod, root)
                if f is not None:
                    todo.append(f.resolve())
    return sorted(seen)


def _digest(files: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        try:
            name = f.relative_to(root).as_posix()
        except ValueError:  # a plugin stage outside the package
            name = f.name
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def stage_start(stage_cls: type) -> Path:
    """Where a stage's code starts: its package folder for a built-in stage (everything
    the stage owns lives there), its module file for a plugin."""
    module = sys.modules[stage_cls.__module__]
    path = Path(module.__file__).resolve()
    root = package_root().resolve()
    if root in path.parents and path.parent.parent == root / "stages":
        return path.parent
    return path


@functools.lru_cache(maxsize=None)
def stage_fingerprint(stage_cls: type) -> str:
    """sha256 over the text of every file in the stage's code closure (once per process)."""
    root = package_root().resolve()
    return _digest(code_closure(stage_start(stage_cls), root), root)


def fingerprint_of(start: Path, root: Path) -> str:
    """The same digest for an arbitrary tree (tests change a file in a copy)."""
    return _digest(code_closure(start, root), root.resolve())
