"""Opening files the way bakery's safety rules need: never through a link bakery did not
make, never waiting on a FIFO or a device file, never reading more than a bound.

Readers (the bundle reader, ``verify``, ``clean``, the cache, ``run -o``'s bundle check)
take files from places a person or another tool controls: a bundle may hold a FIFO that
blocks ``open`` forever, a link to ``/dev/zero`` or to a file outside the bundle, or a
file far larger than anything bakery writes. Writers (the lock, logs, bundles, reports)
must not follow a link planted inside ``out/`` to a file elsewhere.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: A manifest, a cache record, a report or sums.json: far above any bakery writes.
MAX_METADATA_BYTES = 64 << 20
#: Any one bundle or cache file bakery reads whole (a 16K RGBA16F mip chain is ~2.9 GB).
MAX_FILE_BYTES = 4 << 30

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class RefusedFile(OSError):
    """A path bakery will not read or write through: a link, not a regular file, too large."""

    def __init__(self, path, why: str):
        super().__init__(why)
        self.path, self.why = str(path), why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device file"), (stat.S_ISBLK, "a device file"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike, *, limit: int = MAX_FILE_BYTES, beneath: Path | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Refuses (:class:`RefusedFile`) a link, a FIFO, a device file or a socket without
    waiting on it, and a file larger than ``limit``. With ``beneath``, no folder between
    ``beneath`` and ``path`` may be a link either, so a name read from a bundle can never
    reach outside it. ``FileNotFoundError`` passes through."""
    path = Path(path)
    if beneath is not None:
        refuse_links(beneath, path.parent)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except OSError as e:
        if path.is_symlink():
            raise RefusedFile(path, "is a symbolic link; bakery reads only regular files") from None
        raise e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(path, f"is {_kind(st.st_mode)}; bakery reads only regular files")
        if st.st_size > limit:
            raise RefusedFile(path, f"is {st.st_size} bytes, more than the {limit} bakery reads")
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 24, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise RefusedFile(path, f"grew past the {limit} bytes bakery reads")
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike):
    """A binary file object for reading the regular file ``path`` (refused like
    :func:`read_regular`, without the size bound: for hashing in chunks)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except OSError:
        if path.is_symlink():
            raise RefusedFile(path, "is a symbolic link; bakery reads only regular files") from None
        raise
    _require_regular(fd, path, "reads")
    return os.fdopen(fd, "rb")


def _require_regular(fd: int, path: Path, verb: str) -> None:
    """Closes ``fd`` and refuses ``path`` unless what it opened is a regular file."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RefusedFile(path, f"is {_kind(mode)}; bakery {verb} only regular files")


def is_regular(path: str | os.PathLike) -> bool:
    """A regular file, not a link to one (lstat: never opens, never blocks)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def refuse_links(root: Path, path: Path) -> None:
    """Raises :class:`RefusedFile` when ``path`` or any folder between ``root`` (itself
    not checked: the person chose it) and ``path`` is a symbolic link."""
    root, path = Path(root), Path(path)
    try:
        rel = path.relative_to(root)
    except ValueError:
        return
    p = root
    for part in rel.parts:
        p = p / part
        if p.is_symlink():
            raise RefusedFile(p, "is a symbolic link bakery did not create; refusing to write or read through it")


def open_new_for_write(path: Path, *, root: Path | None = None, mode: int = 0o666) -> int:
    """A file descriptor for writing ``path`` from scratch, never through a link
    (``O_NOFOLLOW``; with ``root``, no folder between it and ``path`` may be a link)."""
    path = Path(path)
    if root is not None:
        refuse_links(root, path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC, mode)
    except OSError as e:
        if path.is_symlink():
            raise RefusedFile(path, "is a symbolic link bakery did not create; refusing to write through it") from None
        if e.errno == errno.ENXIO:  # a FIFO nobody reads
            raise RefusedFile(path, "is a FIFO; bakery writes only regular files") from None
        raise
    _require_regular(fd, path, "writes")
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)
    return fd
