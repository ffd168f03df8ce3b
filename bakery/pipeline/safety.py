"""What keeps bakery from touching files it did not write, and faults to one line.

Studios run bakes unattended; a typo in ``[project] out`` or ``-o`` must never cost them
source art. The checks here run before any work: the output and cache folders may not
overlap each other, a source asset or the pipeline file; ``bakery run -o`` replaces only
a bakery bundle (or an empty folder); ``--report`` overwrites only a bake report. The
executor, ``bakery clean`` and the CLI call them; docs/PIPELINE.md "Safety" states the
guarantees they make up.
"""

from __future__ import annotations

import errno
import glob as globlib
import json
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from bakery.errors import BakeryError, UsageError, display_path

#: The one file that marks a folder as a bakery bundle (docs/FORMAT.md).
MANIFEST_NAME = "manifest.json"
_GLOB_CHARS = set("*?[")


# -- [project] out / cache -----------------------------------------------------------
def path_overlaps(out: Path, cache: Path, pipeline_file: Path,
                  asset_paths: Iterable[Path]) -> list[tuple[str, str]]:
    """``(key, message)`` for each way ``out``/``cache`` overlap each other, the pipeline
    file or a source asset path (a file, or a material folder). All paths resolved.

    ``bakery clean`` empties both folders and a bake replaces folders inside ``out``: any
    overlap would let it delete what a person made."""
    problems: list[tuple[str, str]] = []
    if out == cache:
        problems.append(("project.cache", "is the same folder as project.out; give the cache its own folder"))
    elif cache.is_relative_to(out):
        problems.append(("project.cache", "lies inside project.out; give the cache its own folder"))
    elif out.is_relative_to(cache):
        problems.append(("project.out", "lies inside project.cache; give the outputs their own folder"))
    assets = sorted(set(asset_paths))
    for key, folder in (("project.out", out), ("project.cache", cache)):
        if pipeline_file.is_relative_to(folder):
            problems.append((key, f"holds the pipeline file {pipeline_file.name}; bakery clean would delete it"))
            continue
        for p in assets:
            if p.is_relative_to(folder):
                problems.append((key, f"holds the source asset {_short(p, folder)}; bakery clean would delete it"))
                break
            if folder.is_relative_to(p):
                problems.append((key, f"lies inside the source asset folder {p.name}; choose a folder of its own"))
                break
    return problems


def _short(p: Path, folder: Path) -> str:
    return f"{folder.name}/{p.relative_to(folder).as_posix()}" if p != folder else p.name


def is_generated(p: Path, generated: Iterable[Path]) -> bool:
    """Whether ``p`` lies in one of bakery's own folders (out, cache): never a source."""
    return any(p.is_relative_to(g) for g in generated)


def skipped_by_glob(root: Path, pattern: str, generated: Iterable[Path]) -> tuple[Path, ...]:
    """The generated folders a glob skips: those it reaches into from outside (``*/*.png``,
    ``material = "*"``). A glob whose fixed part points inside one (``out/*.png``) skips
    nothing, so the overlap check names the problem instead of the glob matching nothing."""
    fixed = []
    for part in Path(pattern).parts:
        if any(ch in _GLOB_CHARS for ch in part):
            break
        fixed.append(part)
    base = (root / Path(*fixed)).resolve() if fixed else root
    return tuple(g for g in generated if not base.is_relative_to(g))


def declared_asset_paths(table: Any, root: Path, generated: Iterable[Path]) -> list[Path]:
    """Best-effort source paths of a raw ``[assets]`` table (for ``bakery clean``, which
    must work when the rest of the pipeline no longer validates): every role file and
    material folder it names or its globs match, except matches in out/cache."""
    generated = list(generated)
    found: list[Path] = []
    if not isinstance(table, dict):
        return found
    for decl in table.values():
        if not isinstance(decl, dict):
            continue
        for key, value in decl.items():
            if key == "description" or not isinstance(value, str):
                continue
            if any(ch in _GLOB_CHARS for ch in value):
                skip = skipped_by_glob(root, value, generated)
                found += [m for m in (Path(x).resolve() for x in globlib.glob(str(root / value)))
                          if m.is_relative_to(root) and not is_generated(m, skip)]
            else:
                found.append((root / value).resolve())
    return found


# -- bakery run -o DIR -----------------------------------------------------------------
def is_bundle(folder: Path) -> bool:
    """True when ``folder`` holds a manifest.json that bakery wrote (a JSON object with
    its schema and file list): the only kind of non-empty folder bakery may replace."""
    from bakery.safe_files import MAX_METADATA_BYTES, read_regular

    try:
        manifest = json.loads(read_regular(Path(folder) / MANIFEST_NAME, limit=MAX_METADATA_BYTES))
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(manifest, dict) and "schema_version" in manifest and "bakery_version" in manifest
            and isinstance(manifest.get("files"), list))


def check_bundle_target(out_dir: Path, *, key: str = "-o") -> None:
    """Refuses to publish over an existing folder that is neither empty nor a bundle
    (``-o .``, the folder holding the inputs): publishing replaces the whole folder."""
    out_dir = Path(out_dir)
    if out_dir.is_symlink():
        raise UsageError("is a symbolic link; bakery never publishes through a link it did not make: give the "
                         "real folder", where=str(out_dir), key=key)
    if not out_dir.is_dir() or is_bundle(out_dir):
        return
    if any(out_dir.iterdir()):
        raise UsageError("exists and is not a bakery bundle (no bakery manifest.json); bakery replaces only "
                         "its own bundles: choose a new or empty folder", where=str(out_dir), key=key)


# -- bakery decompress -o DIR -----------------------------------------------------------
#: What ``bakery decompress`` leaves in its output folder: the names it wrote, so a later
#: decompress into the same folder replaces those and nothing else.
DECOMPRESS_MARKER = ".bakery-decompress.json"


def decompressed_names(folder: Path) -> set[str] | None:
    """The files an earlier ``bakery decompress`` wrote in ``folder`` (its marker), or None."""
    from bakery.safe_files import MAX_METADATA_BYTES, read_regular

    try:
        doc = json.loads(read_regular(Path(folder) / DECOMPRESS_MARKER, limit=MAX_METADATA_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    names = doc.get("files") if isinstance(doc, dict) and doc.get("written_by") == "bakery decompress" else None
    if not isinstance(names, list) or not all(isinstance(n, str) and "/" not in n for n in names):
        return None
    return set(names)


def pipeline_sources_above(folder: Path) -> list[Path]:
    """Every source asset declared by a pipeline file (``*.toml`` with an ``[assets]``
    table) in ``folder`` or any folder above it, and those pipeline files: what
    ``decompress --force`` may never replace."""
    import tomllib

    found: list[Path] = []
    for d in [folder, *folder.parents]:
        try:
            tomls = sorted(d.glob("*.toml"))
        except OSError:
            continue
        for t in tomls:
            try:
                doc = tomllib.loads(t.read_text(encoding="utf-8-sig")) if t.is_file() and t.stat().st_size < (1 << 20) else {}
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            if isinstance(doc.get("assets"), dict):
                found.append(t.resolve())
                found += declared_asset_paths(doc["assets"], d.resolve(), [])
    return found


def check_decompress_target(out_dir: Path, names: Iterable[str], *, force: bool) -> None:
    """``bakery decompress -o DIR``: DIR must be new, empty or written by an earlier
    decompress (then only its own files are replaced); ``force`` lets it write into any
    folder but still never replaces a source asset of a pipeline above DIR, nor a link."""
    out_dir = Path(out_dir)
    if out_dir.is_symlink():
        raise UsageError("is a symbolic link; give the real folder", where=str(out_dir), key="-o")
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UsageError("exists and is not a folder", where=str(out_dir), key="-o")
    marked = decompressed_names(out_dir)
    ours = marked or set()
    clashes = sorted(n for n in names if (out_dir / n).exists() or (out_dir / n).is_symlink())
    foreign = [n for n in clashes if n not in ours]
    if not force and marked is None and any(out_dir.iterdir()):
        raise UsageError("exists and was not written by bakery decompress; choose a new or empty folder, or --force "
                         "to write into it", where=str(out_dir), key="-o")
    if not foreign:
        return
    if not force:
        raise UsageError(f"holds files an earlier decompress did not write (e.g. {foreign[0]}); choose a new or "
                         "empty folder, or --force to replace them", where=str(out_dir), key="-o")
    sources = pipeline_sources_above(out_dir.resolve())
    for n in foreign:
        target = out_dir / n
        if target.is_symlink() or not target.is_file():
            raise UsageError("is not a regular file; refusing to replace it even with --force", where=str(target),
                             key="-o")
        real = target.resolve()
        hit = next((p for p in sources if real == p or real.is_relative_to(p)), None)
        if hit is not None:
            raise UsageError(f"is a source asset of the pipeline above it ({hit.name}); decompress never replaces "
                             "one, even with --force", where=str(target), key="-o")


# -- --report FILE -----------------------------------------------------------------------
def check_report_target(path: Path | None) -> None:
    """``--report`` may overwrite a previous bake report, never another file."""
    from bakery.pipeline.ownership import is_bake_report

    if path is None or not (Path(path).exists() or Path(path).is_symlink()):
        return
    if Path(path).is_symlink() or not is_bake_report(Path(path)):
        raise UsageError("exists and is not a bake report; refusing to overwrite it", where=str(path),
                         key="--report")


def forget_report(*paths: Path | None) -> None:
    """Removes the previous bake's reports before a bake starts: if this bake cannot write
    its own (a full disk), no stale report claims that everything built."""
    for path in paths:
        if path is not None:
            Path(path).unlink(missing_ok=True)


# -- --asset GLOB ------------------------------------------------------------------------
def check_asset_globs(asset_names: Iterable[str], globs: Iterable[str]) -> None:
    """An ``--asset`` glob that matches no asset is a typo: say so (exit 2) rather than
    bake nothing and overwrite the last report with an empty one."""
    import fnmatch

    names = sorted(set(asset_names))
    for g in globs:
        if not any(fnmatch.fnmatchcase(n, g) for n in names):
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise UsageError(f"{g!r} matches no asset (assets: {shown or 'none'})", key="--asset")


# -- faults and signals -------------------------------------------------------------
class FilesystemError(BakeryError):
    """A file bakery must write or read cannot be (read-only, full disk, not a folder)."""


def filesystem_error(e: OSError) -> FilesystemError:
    """The one line for an OSError that escaped a task: which path, and why."""
    what = e.strerror or type(e).__name__
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        what += " (disk full or file size limit)"
    where = display_path(Path(os.fsdecode(e.filename))) if e.filename is not None else None
    return FilesystemError(f"file system error: {what}", where=where)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread; ``exit_code`` is 128 + the signal
    (130 for Ctrl-C, 143 for SIGTERM), the shells' convention CI systems read."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


#: Seconds a bake has after a signal to clean up and write its report before the process
#: ends anyway (a driver call that does not return cannot run Python's handlers).
SIGNAL_GRACE_S = 10.0


#: The last SIGINT/SIGTERM the handler saw: a library that catches the interrupt and
#: raises a KeyboardInterrupt of its own (Ray's ``ray.get``) must not turn 143 into 130.
_last_signal: list[int] = []


def exit_code_of(e: BaseException) -> int:
    if isinstance(e, Interrupted):
        return e.exit_code
    return 128 + _last_signal[-1] if _last_signal else 130


@contextmanager
def sigterm_as_interrupt(grace_s: float | None = None) -> Iterator[None]:
    """SIGINT and SIGTERM (what CI sends when it cancels a job) end a bake like Ctrl-C:
    staging folders removed, the report written, exit 130 or 143. SIGINT does so even where
    the bake was started with SIGINT ignored (a script's `bakery bake &` inherits SIG_IGN,
    so a later `kill -INT` from the hook would otherwise do nothing).

    Python runs signal handlers only between bytecodes; a main thread blocked inside a
    driver call would never see them. So the signal also wakes a watchdog thread (through
    ``signal.set_wakeup_fd``, written by the C-level handler), which ends the process with
    the same exit code if the bake has not stopped within ``grace_s`` seconds. Outputs are
    published atomically, so stopping there loses nothing; the next bake sweeps the
    staging folders."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    grace = SIGNAL_GRACE_S if grace_s is None else grace_s
    done = threading.Event()

    def interrupt(signum, frame):
        _last_signal.append(signum)
        raise Interrupted(signum)

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def watchdog():
        sig = 0
        while sig not in (signal.SIGINT, signal.SIGTERM):
            try:
                data = os.read(read_fd, 1)
            except OSError:
                return
            if not data or done.is_set():
                return
            sig = data[0]
        if not done.wait(grace):
            try:
                os.write(2, f"interrupted: the bake did not stop within {grace:g} s of "
                            f"{signal.Signals(sig).name} (a device call that does not return); exiting; "
                            "finished outputs are kept\n".encode())
            except (OSError, ValueError):
                pass
            os._exit(128 + sig)

    previous_term = signal.signal(signal.SIGTERM, interrupt)
    previous_int = signal.signal(signal.SIGINT, interrupt)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    thread = threading.Thread(target=watchdog, name="bakery-signal-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)
        os.close(write_fd)  # the watchdog's read returns b"" and it ends
        thread.join(timeout=1.0)
        os.close(read_fd)


# -- bakery clean ----------------------------------------------------------------------
#: What bakery writes directly in the output folder besides bundles (a bake; `view --snapshot`
#: its record), and in the cache.
OUT_FILES = ("bake-report.json", "report.html", "view-snapshot.json")
CACHE_PARTS = ("entries", "records", "device", "report")


def _remove(p: Path) -> None:
    import shutil

    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def _prune_emptied(root: Path, removed: Iterable[Path]) -> None:
    """Removes the folders below ``root`` that only held what clean removed (deepest
    first); folders a person made empty, and ``root``, stay."""
    candidates = set()
    for p in removed:
        for parent in p.parents:
            if parent == root or not parent.is_relative_to(root):
                break
            candidates.add(parent)
    for d in sorted(candidates, key=lambda p: len(p.parts), reverse=True):
        try:
            if d.is_dir() and not d.is_symlink() and not any(d.iterdir()):
                d.rmdir()
        except OSError:
            pass


def _is_leftover(p: Path) -> bool:
    from bakery.formats.publish import ASIDE_SUFFIX, stale_staging

    if p.is_symlink() or not p.is_dir():
        return False
    return p in stale_staging(p.parent) or (p.name.endswith(ASIDE_SUFFIX) and is_bundle(p))


def _ours_at_top(p: Path) -> bool:
    from bakery.pipeline.ownership import is_bake_report, is_html_report

    from bakery.view.snapshot import is_snapshot_record

    return ((p.name == OUT_FILES[0] and is_bake_report(p)) or (p.name == OUT_FILES[1] and is_html_report(p))
            or (p.name == OUT_FILES[2] and is_snapshot_record(p)))


def clean_output(out: Path, keep: Iterable[str] = ()) -> tuple[int, list[Path]]:
    """Removes what bakery can prove it wrote in ``out``: bundle folders (with any engine
    files inside them), the task logs it wrote in its own ``logs/`` folder, its reports and staging
    leftovers. Everything else stays, empty folders a person made included. Returns
    ``(entries removed, files kept)``."""
    from bakery.pipeline.ownership import LEDGER, disown, is_owned

    out = Path(out)
    if not out.is_dir() or out.is_symlink():
        return 0, []
    removed: list[Path] = []
    todo = [p for p in sorted(out.iterdir()) if p.name not in keep]
    while todo:
        p = todo.pop()
        if p.is_symlink():
            continue  # a link is never ours to follow or remove
        if p.is_dir() and (is_bundle(p) or _is_leftover(p)):
            _remove(p)
            removed.append(p)
        elif p.is_dir() and p == out / "logs" and is_owned(p):
            from bakery.pipeline.task_log import is_task_log

            for log in sorted(p.rglob("*.log")):
                if not any(q.is_symlink() for q in log.parents if q.is_relative_to(p)) and is_task_log(log):
                    log.unlink()
                    removed.append(log)
            _prune_emptied(p, removed)
            if not any(p.iterdir()):
                p.rmdir()
                disown(p)
        elif p.is_dir():
            todo.extend(sorted(p.iterdir()))
        elif p.parent == out and _ours_at_top(p):
            p.unlink()
            removed.append(p)
    _prune_emptied(out, removed)
    kept = [p for p in sorted(out.rglob("*")) if not p.is_dir() and p.name not in keep and p != out / LEDGER]
    return len(removed), kept


def clean_cache(cache: Path) -> tuple[int, list[Path]]:
    """Removes the cache's own parts (the folders its ledger lists, or an earlier bakery's
    recognised by their shape); the folder
    itself goes too when bakery made it and nothing else is in it."""
    from bakery.pipeline.ownership import is_owned, legacy_cache_part, read_ledger, write_ledger

    cache = Path(cache)
    if not cache.is_dir() or cache.is_symlink():
        return 0, []
    doomed = [cache / n for n in CACHE_PARTS if is_owned(cache / n) or legacy_cache_part(cache, n)]
    for p in doomed:
        _remove(p)
    made_by_us = read_ledger(cache)["made"]
    write_ledger(cache, {"made": False, "folders": []})
    kept = sorted(cache.rglob("*"))
    if not kept and made_by_us:
        cache.rmdir()
    return len(doomed), [p for p in kept if not p.is_dir()]
