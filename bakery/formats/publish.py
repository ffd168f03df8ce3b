"""Atomic replacement of a bundle folder.

A crash or SIGKILL at any instant must leave either the complete old or the complete
new folder at the final path. On Linux ``renameat2(RENAME_EXCHANGE)`` swaps the two
directories in one step. Where that is unavailable (other systems, some filesystems)
the fallback is: rename old aside, rename new in, remove old; a leftover aside-folder
from a crash in between is recovered by :func:`recover` (called at the start of every
publish and by the reader), so the old bundle reappears if the new one never landed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
from pathlib import Path

ASIDE_SUFFIX = ".bakery-old"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def aside_path(final_dir: Path) -> Path:
    final_dir = Path(final_dir)
    return final_dir.with_name(final_dir.name + ASIDE_SUFFIX)


def recover(final_dir: Path) -> None:
    """Finishes or undoes a publish interrupted by a crash (idempotent)."""
    final_dir, aside = Path(final_dir), aside_path(final_dir)
    from bakery.safe_files import is_regular

    if aside.is_symlink() or not aside.is_dir() or not is_regular(aside / "manifest.json"):
        return  # not an aside bakery made (a person's folder that happens to end in the suffix)
    if final_dir.exists():
        shutil.rmtree(aside)          # the new folder landed; only the cleanup was lost
    else:
        os.rename(aside, final_dir)   # crashed between the two renames: the old one comes back


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swaps two paths; False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_publish(staging_dir: Path, final_dir: Path, *, use_exchange: bool = True) -> None:
    """Replaces ``final_dir`` by ``staging_dir`` (same filesystem); see the module docstring."""
    staging_dir, final_dir = Path(staging_dir), Path(final_dir)
    if not staging_dir.is_dir():
        raise FileNotFoundError(f"staging folder {staging_dir} does not exist")
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    recover(final_dir)
    if final_dir.exists() and not final_dir.is_dir():
        raise NotADirectoryError(f"{final_dir} exists and is not a folder; refusing to replace it")
    carry_foreign_files(final_dir, staging_dir)
    if not final_dir.exists():
        os.rename(staging_dir, final_dir)
    elif use_exchange and _exchange(staging_dir, final_dir):
        shutil.rmtree(staging_dir)    # now holds the old bundle
    else:
        aside = aside_path(final_dir)
        os.rename(final_dir, aside)
        os.rename(staging_dir, final_dir)
        shutil.rmtree(aside)
    _fsync_dir(final_dir.parent)


def bakery_written_names(bundle_dir: Path) -> set[str]:
    """The files of a bundle that bakery wrote: manifest.json and what it lists. Empty
    when there is no readable manifest (then nothing in the folder is known to be ours)."""
    import json

    from bakery.safe_files import MAX_METADATA_BYTES, read_regular

    try:
        manifest = json.loads(read_regular(Path(bundle_dir) / "manifest.json", limit=MAX_METADATA_BYTES))
        listed = {f["name"] for f in manifest["files"]}
    except (OSError, ValueError, RecursionError, TypeError, KeyError):
        return set()
    return {"manifest.json"} | {n for n in listed if isinstance(n, str)}


def carry_foreign_files(final_dir: Path, staging_dir: Path) -> int:
    """Copies into ``staging_dir`` every file of ``final_dir`` that bakery did not write
    (an engine's ``.meta`` files, notes), so publishing replaces only bakery's own files.
    A file the new bundle also writes is bakery's to replace. Returns how many were kept."""
    final_dir, staging_dir = Path(final_dir), Path(staging_dir)
    if not final_dir.is_dir() or final_dir.is_symlink():
        return 0
    ours = bakery_written_names(final_dir)
    kept = 0
    for p in sorted(final_dir.rglob("*")):
        rel = p.relative_to(final_dir).as_posix()
        if p.is_dir() and not p.is_symlink() or rel in ours:
            continue
        target = staging_dir / rel
        if target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(p, target, follow_symlinks=False)  # same filesystem: no copy of a big file
        except OSError:
            shutil.copy2(p, target, follow_symlinks=False)
        kept += 1
    return kept


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_staging_dir(final_dir: Path) -> Path:
    """A fresh hidden folder beside ``final_dir`` (same filesystem, so publishing is a
    rename), readable like any folder the user creates: mkdtemp's 0700 would leave
    bundles unreadable to build farms and importers running as other users."""
    import tempfile

    final_dir = Path(final_dir)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}{STAGING_TAG}{os.getpid()}-", dir=final_dir.parent))
    os.chmod(path, 0o777 & ~_umask())
    return path


#: Staging folders are named ``.<final>.staging-<pid>-<random>``: the pid says whose they are.
STAGING_TAG = ".staging-"
_STAGING = re.compile(r"^\..+\.staging-(\d+)-[A-Za-z0-9_]+$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def stale_staging(parent: Path, final_name: str | None = None) -> list[Path]:
    """Staging folders in ``parent`` (of ``final_name`` only, if given) whose maker is no
    longer running: a killed bake's or run's leftovers, safe to remove."""
    out = []
    try:
        children = sorted(Path(parent).iterdir())
    except OSError:
        return out
    for p in children:
        m = _STAGING.match(p.name)
        if not m or p.is_symlink() or not p.is_dir():
            continue
        if final_name is not None and not p.name.startswith(f".{final_name}{STAGING_TAG}"):
            continue
        if int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            out.append(p)
    return out


def write_atomic(path: Path, data: bytes) -> None:
    """Writes a whole file or nothing (temp file + rename), with umask permissions."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise name_path(e, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def name_path(e: OSError, path: Path) -> OSError:
    """``e`` with ``path`` as its file name when the failing call gave none (a ``write``
    that hit a full disk names no file): every file system error names its path."""
    if e.filename is None:
        return type(e)(e.errno, e.strerror or str(e), str(path)) if e.errno is not None else e
    return e
