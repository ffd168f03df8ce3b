"""One bake per output folder at a time.

An advisory ``flock`` on a hidden file inside the output folder: the kernel drops it when
the holder dies (even by SIGKILL), so a crashed bake never leaves a stale lock behind.
The file is never deleted (``bakery clean`` empties the folder around it): unlinking a
lock file that others may be waiting on would let two holders in.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Callable

from bakery.errors import UsageError


LOCK_NAME = ".bakery.lock"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class LockBusy(UsageError):
    """Another bake holds the output folder and ``--no-wait`` was given."""


def lock_path_for(out_dir: Path) -> Path:
    return out_dir / LOCK_NAME


class OutputLock:
    """Context manager; ``wait=False`` fails at once, else waits, saying so once."""

    def __init__(self, out_dir: Path, *, wait: bool = True, say: Callable[[str], None] = print,
                 poll_s: float = 0.2):
        self.out_dir = Path(out_dir)
        self.path = lock_path_for(self.out_dir)
        self.wait, self.say, self.poll_s = wait, say, poll_s
        self._fd: int | None = None

    def _holder(self) -> str:
        try:
            from bakery.safe_files import read_regular

            pid = read_regular(self.path, limit=64).decode(errors="replace").strip()
            return f" (pid {pid})" if pid else ""
        except OSError:
            return ""

    def __enter__(self) -> "OutputLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW, 0o644) \
            if not self.path.is_symlink() else None
        if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
            if fd is not None:
                os.close(fd)
            raise UsageError("is a symbolic link or not a regular file; bakery writes its lock only into a file of its own "
                             "(remove it)", where=str(self.path))
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not self.wait:
                    os.close(fd)
                    raise LockBusy(f"another bake is running on this output folder{self._holder()}; "
                                   "rerun without --no-wait to wait for it", where=str(self.out_dir)) from None
                if not told:
                    self.say(f"waiting for another bake on {self.out_dir}{self._holder()} to finish ...")
                    told = True
                time.sleep(self.poll_s)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
