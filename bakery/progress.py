"""Progress reporting: a tqdm bar on a terminal, plain log lines otherwise (CI logs,
nightly jobs), so long bakes never look hung and never flood a log."""

from __future__ import annotations

import sys
import time


class _PlainProgress:
    def __init__(self, total: int, desc: str, stream, every_s: float):
        self.total, self.desc, self.stream, self.every_s = total, desc, stream, every_s
        self.n = 0
        self._last = time.monotonic()
        self._postfix = ""

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.every_s or self.n >= self.total:
            self._last = now
            print(f"{self.desc}: {self.n}/{self.total}{self._postfix}", file=self.stream, flush=True)

    def set_postfix_str(self, s: str) -> None:
        self._postfix = f" {s}" if s else ""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(total: int, desc: str, *, stream=None, every_s: float = 5.0, enabled: bool = True):
    """A context-managed progress object with ``update(n)`` and ``set_postfix_str``."""
    stream = stream or sys.stderr
    if enabled and hasattr(stream, "isatty") and stream.isatty():
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, file=stream, leave=False, dynamic_ncols=True)
    return _PlainProgress(total, desc, stream, every_s if enabled else float("inf"))
