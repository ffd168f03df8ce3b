"""A stage's code fingerprint for cache keys: every file that can shape its output.

Starting from the stage's own package, it follows Python imports of ``bakery`` modules
and, from those and from every Slang file found, the ``#include``/``import`` lines of
Slang, to a closure; the fingerprint hashes the text of all of it. No list is kept by
hand, so editing any included Slang file or any Python that generates Slang rebuilds
exactly the bakes it feeds. The orchestration (``bakery.pipeline``, the CLI) is left
out: it places outputs but never shapes them.

Parsing every module's imports is most of a cached re-bake's planning, so a fingerprint can
be kept in a memo file in a cache folder bakery owns, with the ``stat`` of every file it
read: a later process takes it while each of those files and the listing of the stage's
own folder are as they were (size, mtime, ctime and inode: writing a file moves its ctime,
which no tool sets back) and hashes again otherwise.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Iterator

PACKAGE = "bakery"
#: Modules that orchestrate bakes or draw the report page but never shape a bundle's bytes
#: (a stage's report section calls bakery.reporting; the page's memo of each section is
#: salted with that module's bytes, so a change to it redraws sections, not bundles).
_NOT_CODE = ("bakery.pipeline", "bakery.cli", "bakery.__main__", "bakery.reporting")
#: Every stage writes through the bundle writer, so its code shapes every bundle.
_ALWAYS = ("formats/bundle.py",)
#: The memo's place in a pipeline's cache folder: beside the tasks' records of their keys.
FINGERPRINT_MEMO = Path("records") / "code-fingerprints.json"
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
    return sorted(_closure(start.resolve(), (root or package_root()).resolve()))


def _closure(start: Path, root: Path) -> dict[Path, list[int]]:
    """code_closure's files, each with its signature taken before it was read."""
    todo = sorted(start.rglob("*.py")) + sorted(start.rglob("*.slang")) if start.is_dir() else [start]
    todo += [root / p for p in _ALWAYS]
    seen: dict[Path, list[int]] = {}
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen[path] = _signature(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        todo += _slang_references(text, path, root)
        if path.suffix == ".py" and root in path.parents:
            for mod in _python_imports(path, root):
                if mod.startswith(_NOT_CODE):
                    continue
                f = _module_file(mod, root)
                if f is not None:
                    todo.append(f.resolve())
    return seen


def _signature(path: Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _listing(start: Path) -> list[str]:
    """The code files of a stage's folder by name: a new one joins the closure unimported."""
    if not start.is_dir():
        return [start.name]
    return sorted(p.relative_to(start).as_posix() for pattern in ("*.py", "*.slang") for p in start.rglob(pattern))


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
def stage_fingerprint(stage_cls: type, memo: Path | None = None) -> str:
    """sha256 over the text of every file in the stage's code closure (once per process;
    with ``memo``, a file kept between processes: see the module's docstring)."""
    return fingerprint_of(stage_start(stage_cls), package_root(), memo)


def fingerprint_of(start: Path, root: Path, memo: Path | None = None) -> str:
    """The digest of ``start``'s code closure below ``root`` (a stage's, or any tree: tests
    change a file in a copy), looked up in ``memo`` first where given."""
    start, root = start.resolve(), root.resolve()
    if memo is None:
        return _digest(sorted(_closure(start, root)), root)
    entry_name = f"{root}|{start}"
    entries = _read_memo(memo)
    entry = entries.get(entry_name)
    listing = _listing(start)
    if (isinstance(entry, dict) and entry.get("listing") == listing and isinstance(entry.get("files"), dict)
            and entry["files"] and all(_signature(Path(f)) == sig for f, sig in entry["files"].items())
            and isinstance(entry.get("digest"), str)):
        return entry["digest"]
    files = _closure(start, root)
    digest = _digest(sorted(files), root)
    if all(sig is not None and _signature(f) == sig for f, sig in files.items()):
        # kept only if no file changed while it was read and hashed
        entries[entry_name] = {"digest": digest, "listing": listing, "files": {str(f): sig for f, sig in files.items()}}
        _write_memo(memo, entries)
    return digest


def _read_memo(memo: Path) -> dict:
    from bakery.safe_files import read_regular

    try:
        entries = json.loads(read_regular(memo, limit=16 << 20))
    except (OSError, ValueError):  # none yet, a link, damaged: hashed again
        return {}
    return entries if isinstance(entries, dict) else {}


def _write_memo(memo: Path, entries: dict) -> None:
    from bakery.formats.publish import write_atomic
    from bakery.pipeline.ownership import is_owned

    try:
        if is_owned(memo.parent):   # a folder an earlier bake claimed: planning writes nowhere else
            write_atomic(memo, json.dumps(entries, sort_keys=True).encode())
    except OSError:
        pass  # the memo only saves time
