"""Which folders and files inside ``out/`` and the cache bakery can prove it wrote.

``[project] out`` or ``cache`` may name a folder that already holds a person's work
(``out = "build"``), with subfolders that share a name with bakery's (``logs/``,
``records/``, ``report/``). A name is no proof: bakery lists every folder it makes for
itself in a ledger, :data:`LEDGER` in the folder above (``out/``, the cache), and deletes
or replaces only inside listed folders, in bundles (its manifest), in its own staging
leftovers and in files whose contents say bakery wrote them (the bake reports). A
same-named folder it did not make is refused before a bake writes into it, and
``clean`` leaves it alone. The ledger also says whether bakery made the cache folder
itself, so ``clean`` removes that folder only then.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Iterable

from bakery.errors import UsageError
from bakery.safe_files import MAX_METADATA_BYTES, RefusedFile, is_regular, read_regular, refuse_links

#: The ledger of folders bakery made in a folder (JSON ``{"made": bool, "folders": [names]}``).
LEDGER = ".bakery-owned"
_KEY = re.compile(r"^[0-9a-f]{64}$")


def read_ledger(root: Path) -> dict:
    """``root``'s ledger; an absent or unreadable one owns nothing."""
    try:
        doc = json.loads(read_regular(Path(root) / LEDGER, limit=MAX_METADATA_BYTES))
    except (OSError, ValueError, RecursionError):
        return {"made": False, "folders": []}
    folders = doc.get("folders") if isinstance(doc, dict) else None
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        return {"made": False, "folders": []}
    return {"made": doc.get("made") is True, "folders": sorted(set(folders))}


def write_ledger(root: Path, doc: dict) -> None:
    """Writes (or, when it owns nothing, removes) ``root``'s ledger; a rename, never through a link."""
    from bakery.formats.publish import write_atomic

    path = Path(root) / LEDGER
    if not doc["made"] and not doc["folders"]:
        if path.is_file() and not path.is_symlink():
            path.unlink()
        return
    write_atomic(path, (json.dumps({"made": doc["made"], "folders": sorted(set(doc["folders"]))}) + "\n").encode())


def is_owned(folder: Path) -> bool:
    """Whether bakery made ``folder`` (a real folder listed in its parent's ledger)."""
    folder = Path(folder)
    return not folder.is_symlink() and folder.is_dir() and folder.name in read_ledger(folder.parent)["folders"]


def _mark(folder: Path) -> None:
    doc = read_ledger(folder.parent)
    write_ledger(folder.parent, {**doc, "folders": doc["folders"] + [folder.name]})


def disown(folder: Path) -> None:
    """Takes ``folder`` off its parent's ledger (clean removed it)."""
    doc = read_ledger(folder.parent)
    write_ledger(folder.parent, {**doc, "folders": [f for f in doc["folders"] if f != folder.name]})


def claim_dir(folder: Path, root: Path, *, adopt: Callable[[Path], bool] = lambda p: False,
              key: str | None = None) -> Path:
    """Makes (or checks) ``folder`` below ``root`` as bakery's own: created and marked when
    new, marked when empty or when ``adopt`` recognises it as an earlier bakery's unmarked
    folder; otherwise a one-line :class:`UsageError`. No link on the way is followed."""
    folder, root = Path(folder), Path(root)
    try:
        refuse_links(root, folder)
    except RefusedFile as e:
        raise UsageError(e.why, where=e.path, key=key) from None
    if is_owned(folder):
        return folder
    if not folder.exists():
        folder.mkdir(parents=True)
    elif not folder.is_dir():
        raise UsageError("exists and is not a folder; bakery needs this name for its own folder", where=str(folder),
                         key=key)
    elif any(folder.iterdir()) and not adopt(folder):
        raise UsageError("exists and was not made by bakery; bakery writes only into its own "
                         "folders: move it, or give project.out/cache a folder of its own", where=str(folder), key=key)
    _mark(folder)
    return folder


# -- what earlier (unmarked) bakery versions left: recognised by shape, never by name alone --
def legacy_logs(stages: Iterable[str]) -> Callable[[Path], bool]:
    """An unmarked ``logs/`` holding only ``<stage>/...log`` files of this pipeline's stages."""
    names = set(stages)

    def check(folder: Path) -> bool:
        files = [p for p in folder.rglob("*") if not p.is_dir() or p.is_symlink()]
        return bool(files) and all(
            is_regular(p) and p.suffix == ".log" and p.relative_to(folder).parts[0] in names for p in files)
    return check


def legacy_entries(folder: Path) -> bool:
    """An unmarked ``entries/`` of sealed or staging cache entries (folders named by key)."""
    children = list(folder.iterdir())
    return bool(children) and all(
        p.is_dir() and not p.is_symlink() and (_KEY.match(p.name) or re.match(r"^\.[0-9a-f]{64}\.staging-", p.name))
        for p in children)


def legacy_records(folder: Path) -> bool:
    """An unmarked ``records/`` of ``<stage>/<asset>.json`` cache records."""
    from bakery.pipeline.cache_records import well_formed_record

    files = [p for p in folder.rglob("*") if not p.is_dir() or p.is_symlink()]
    for p in files:
        try:
            if p.suffix != ".json" or not well_formed_record(json.loads(read_regular(p, limit=MAX_METADATA_BYTES))):
                return False
        except (OSError, ValueError, RecursionError):
            return False
    return bool(files)


def is_bake_report(path: Path) -> bool:
    """``bake-report.json`` as :class:`bakery.pipeline.report.BakeReport` writes it."""
    try:
        doc = json.loads(read_regular(path, limit=MAX_METADATA_BYTES))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and "schema" in doc and "tasks" in doc and "totals" in doc


HTML_REPORT_NAME = "report.html"
#: How every ``report.html`` bakery writes begins.
HTML_REPORT_HEAD = "<!doctype html><html><head><meta charset='utf-8'><title>bakery report: "


def is_html_report(path: Path) -> bool:
    try:
        head = read_regular(path, limit=1 << 30)[:len(HTML_REPORT_HEAD)]
    except OSError:
        return False
    return head == HTML_REPORT_HEAD.encode()


def check_replaceable(path: Path, ours: Callable[[Path], bool], *, key: str | None = None) -> None:
    """A file bakery is about to replace must be absent or one it wrote (never a link)."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not ours(path)):
        raise UsageError("exists and was not written by bakery; refusing to replace it (move it away)",
                         where=str(path), key=key)


def legacy_cache_part(cache: Path, name: str) -> bool:
    """An unmarked part of a cache an earlier bakery wrote: ``entries``/``records`` by
    their shape; ``device``/``report`` only beside such an ``entries``."""
    part, entries = cache / name, cache / "entries"
    if part.is_symlink() or not part.is_dir() or is_owned(part):
        return False
    bakery_entries = not entries.is_symlink() and entries.is_dir() and (is_owned(entries) or legacy_entries(entries))
    if name == "entries":
        return bakery_entries and not is_owned(entries)
    if name == "records":
        return legacy_records(part)
    return bakery_entries


def claim_bake_folders(out: Path, cache: Path, stages: Iterable[str]) -> None:
    """Before a bake writes anything: bakery's folders in ``out`` and the cache are its
    own (made and marked, or recognised), the reports it replaces are its own, and no
    link leads out of either folder. One :class:`UsageError` line otherwise."""

    if not cache.exists():
        cache.mkdir(parents=True)
        write_ledger(cache, {"made": True, "folders": []})  # bakery made it: clean may remove it once empty
    claim_dir(out / "logs", out, adopt=legacy_logs(stages), key="project.out")
    parts = ("entries", "records", "device", "report")
    legacy = {name: legacy_cache_part(cache, name) for name in parts}  # before any is marked
    for name in parts:
        if name == "device" and (cache / name).is_symlink() and (cache / name).is_dir():
            continue  # a person's link to a shared Slang compile cache: used as is, never cleaned through
        claim_dir(cache / name, cache, adopt=lambda p, name=name: legacy[name], key="project.cache")
    check_replaceable(out / "bake-report.json", is_bake_report, key="project.out")
    check_replaceable(out / HTML_REPORT_NAME, is_html_report, key="project.out")
