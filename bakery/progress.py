"""Progress reporting, the one place for it: a tqdm bar on a terminal, plain log lines
otherwise (CI logs, nightly jobs), so long bakes never look hung and never flood a log.
:func:`progress` serves one task (``bakery run``); :class:`StageProgress` counts a bake's
tasks per stage and hands each task its in-task callback."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO


def describe(done: Any, total: Any, info: dict) -> str:
    """``12/300 loss=0.0123 psnr_db=31.2``: a task's progress as one short string."""
    frac = f"{done}/{total}" if total else f"{done}"
    extra = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items())
    return f"{frac} {extra}".strip()


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


class StageProgress:
    """Counts finished tasks of one stage; :meth:`task_callback` is handed to the stage
    as ``ctx.progress(done, total=None, **info)`` for progress inside a task."""

    def __init__(self, stage: str, total: int, *, log: logging.Logger, stream: TextIO | None = None,
                 bars: bool | None = None):
        self.stage, self.total, self.log = stage, total, log
        self.stream = stream or sys.stderr
        self.done = 0
        use_bars = self.stream.isatty() if bars is None else bars
        self.bar = None
        if use_bars:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=stage, unit="task", file=self.stream, leave=True,
                            dynamic_ncols=True)
        self._last_line = 0.0

    def task_callback(self, asset: str):
        def progress(done: Any = None, total: Any = None, **info: Any) -> None:
            text = describe(done, total, info)
            if self.bar is not None:
                self.bar.set_postfix_str(f"{asset} {text}", refresh=True)
                return
            now = time.monotonic()
            last = total is not None and done is not None and done >= total
            if last or now - self._last_line >= 5.0:  # a plain line at most every 5 s
                self._last_line = now
                self.log.info("%s/%s: %s", self.stage, asset, text)
        return progress

    def finished(self, asset: str, status: str, seconds: float, detail: str = "") -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            if status == "failed":
                self.bar.write(f"{self.stage}/{asset}: failed: {detail}", file=self.stream)
        else:
            tail = f" ({detail})" if detail else ""
            self.log.info("[%d/%d] %s/%s %s in %.2f s%s", self.done, self.total, self.stage, asset,
                          status, seconds, tail)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
