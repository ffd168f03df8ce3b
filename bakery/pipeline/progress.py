"""Progress per stage: tqdm bars on a terminal, plain log lines otherwise (CI logs,
pre-submit hooks), so output stays readable when piped into a file."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO


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
            extra = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items())
            if self.bar is not None:
                frac = f"{done}/{total}" if total else f"{done}"
                self.bar.set_postfix_str(f"{asset} {frac} {extra}".strip(), refresh=True)
                return
            now = time.monotonic()
            last = total is not None and done is not None and done >= total
            if last or now - self._last_line >= 5.0:  # a plain line at most every 5 s
                self._last_line = now
                frac = f"{done}/{total}" if total else f"{done}"
                self.log.info("%s/%s: %s %s", self.stage, asset, frac, extra)
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
