"""Progress reporting, the one place for it: a tqdm bar on a terminal, plain log lines
otherwise (CI logs, nightly jobs), so long bakes never look hung and never flood a log.
:func:`progress` serves one task (``bakery run``); :class:`StageProgress` counts a bake's
tasks per stage and hands each task its in-task callback; :class:`TrainingProgress` turns
a training loop's step counts into live quality (loss, the stage's metric), step rate
and time left, and records a convergence curve at fixed steps."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Callable, TextIO


def describe(done: Any, total: Any, info: dict) -> str:
    """``12/300 loss=0.0123 psnr_db=31.2 eta=0:41``: a task's progress as one short string."""
    frac = f"{done}/{total}" if total else f"{done}"
    return f"{frac} {format_info(info)}".strip()


def format_info(info: dict) -> str:
    """``k=v`` pairs, floats to 4 significant digits, ``eta`` (seconds) as m:ss."""
    parts = []
    for k, v in info.items():
        if k == "eta" and isinstance(v, (int, float)):
            parts.append(f"eta={format_seconds(v)}")
        elif isinstance(v, float):
            parts.append(f"{k}={v:.4g}")
        else:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def format_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


#: The most of a training's wall time that probes made for display alone may take.
PROBE_SHARE = 0.1


class TrainingProgress:
    """A trainer's ``progress`` (``update(n)`` per finished command buffer) that reports
    ``report(done, total=..., **info)`` with the step rate, the time left and, from
    ``probe``, the live quality (e.g. ``mse`` and ``psnr_db``).

    ``probe(done)`` returns a dict of metrics (a ``step`` key, if any, says which step
    they are of: a trainer runs ahead of its progress by one command buffer). It reads the current quality back from the device, which costs a
    readback, so it runs at most every ``interval_s`` seconds for display, and at every
    ``curve_every`` steps for :attr:`curve`. Curve points depend only on step counts,
    never on the clock, so a bundle that stores the curve stays deterministic. Probes for
    display alone take about ``PROBE_SHARE`` of the time at most: after a costly one (a
    whole-set decode of a 4096^2 material takes seconds) the next waits, and the last
    step's is made only while probing has stayed within that share (the stage measures
    its result itself).
    """

    def __init__(self, report: Callable[..., Any], total: int, *, probe: Callable[[int], dict] | None = None,
                 curve_every: int = 0, interval_s: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.report, self.total, self.probe = report, total, probe
        self.curve_every, self.interval_s, self.clock = curve_every, interval_s, clock
        self.done = 0
        self.curve: list[dict] = []
        self.latest: dict = {}
        self._start = clock()
        self._last_probe = self._start
        self._probe_cost = self._probing = 0.0   # the last probe's seconds; all probes'
        self._next_curve = curve_every if curve_every > 0 else None

    def update(self, n: int) -> None:
        self.done += n
        now = self.clock()
        on_curve = self._next_curve is not None and self.done >= min(self._next_curve, self.total)
        # the last step's quality shown too, unless probing has already cost its share
        final = self.done >= self.total and self._probing <= PROBE_SHARE * (now - self._start)
        if self.probe is not None and (on_curve or final or self._display_due(now)):
            self.latest = dict(self.probe(self.done))
            self._last_probe = self.clock()
            self._probe_cost = self._last_probe - now
            self._probing += self._probe_cost
            if on_curve:
                point = {"step": self.done, **self.latest}
                if self.curve and self.curve[-1]["step"] == point["step"]:
                    self.curve[-1] = point  # the trainer ran ahead: one point per step
                else:
                    self.curve.append(point)
                while self._next_curve is not None and self._next_curve <= self.done:
                    self._next_curve += self.curve_every
        info = {k: v for k, v in self.latest.items() if k != "step"}
        elapsed = now - self._start
        if elapsed > 0 and self.done > 0:
            rate = self.done / elapsed
            info["steps_s"] = float(rate)
            info["eta"] = (self.total - self.done) / rate
        self.report(self.done, total=self.total, **info)

    def _display_due(self, now: float) -> bool:
        """A probe for display: every ``interval_s``, or less often where the last one cost
        more than PROBE_SHARE of the time since."""
        wait = max(self.interval_s, self._probe_cost * (1.0 / PROBE_SHARE - 1.0))
        return now - self._last_probe >= wait


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

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
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

    def task_callback(self, asset: str, clock: Callable[[], float] = time.monotonic):
        """``ctx.progress`` for one task: lines (or the bar's postfix) named ``stage/asset``,
        with the time left from the count's rate where the stage does not say it."""
        started = clock()

        def progress(done: Any = None, total: Any = None, **info: Any) -> None:
            if "eta" not in info and isinstance(done, (int, float)) and isinstance(total, (int, float)) and done > 0:
                info["eta"] = (clock() - started) / done * max(0, total - done)
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

    def finished(self, asset: str, status: str, seconds: float, detail: str = "", overall: str = "") -> None:
        """One task done; ``overall`` is the bake's count and time left (:class:`BakeCount`)."""
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            if overall:
                self.bar.set_postfix_str(overall, refresh=True)
            if status == "failed":
                self.bar.write(f"{self.stage}/{asset}: failed: {detail}", file=self.stream)
        else:
            tail = f" ({detail})" if detail else ""
            self.log.info("[%d/%d] %s/%s %s in %.2f s%s%s", self.done, self.total, self.stage, asset,
                          status, seconds, tail, f"; {overall}" if overall else "")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class BakeCount:
    """The whole bake's progress: tasks done of all, and the time left at the rate so far."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic):
        self.total, self.done, self.clock = total, 0, clock
        self._start = clock()

    def finished(self) -> str:
        self.done += 1
        left = self.total - self.done
        if not left:
            return f"bake: {self.done}/{self.total} tasks"
        eta = (self.clock() - self._start) / self.done * left
        return f"bake: {self.done}/{self.total} tasks, ~{format_seconds(eta)} left"
