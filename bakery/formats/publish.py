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
    if not aside.exists():
        return
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
