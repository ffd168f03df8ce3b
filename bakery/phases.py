"""Where a task's host time goes: seconds per phase, recorded by the code that knows.

On a GPU machine a task's wall time is mostly host work around a few seconds of training
(loading, BCn baselines, metrics, encoding, writing); a nightly job over a library is
sized by that split, so each stage marks its phases (``with phases.time("baselines"):``)
and :func:`bakery.pipeline.task.run_task` logs the record once per task (the task log,
``PHASES_LOG_PREFIX``), never in the bundle, whose bytes must not depend on timings.

Phases nest: time in an inner phase (``writing`` inside ``encoding``) is not counted in
the outer one, so on the task's thread the phases and ``other`` sum to the task's wall
time. Work running beside training on other threads (:mod:`bakery.overlap`) is recorded
apart, under ``overlapped``: it took that long, but not on the task's critical path.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import threading
import time as _time
from typing import Iterator

#: The phases stages mark, in the order a task goes through them. ``waiting``: the task's
#: thread waiting for work it started beside training (bakery.overlap); ``other``: the
#: task's time in no phase.
PHASES = ("load", "baselines", "training", "metrics", "encoding", "writing", "waiting")
#: What starts the task log's line holding a task's record (JSON follows it).
PHASES_LOG_PREFIX = "phase seconds: "


class PhaseClock:
    """One task's seconds per phase: on its own thread (``phases``) and beside it (``overlapped``)."""

    def __init__(self, now=_time.perf_counter) -> None:
        self._now = now
        self.started = now()
        self.thread = threading.get_ident()   # the task's thread; any other one works beside it
        self.phases: dict[str, float] = {}
        self.overlapped: dict[str, float] = {}
        self._lock = threading.Lock()
        self._open = threading.local()        # per thread: the seconds of nested phases so far

    @contextlib.contextmanager
    def time(self, name: str) -> Iterator[None]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r} (known: {', '.join(PHASES)})")
        stack = self._open.__dict__.setdefault("stack", [])
        start = self._now()
        stack.append(0.0)
        try:
            yield
        finally:
            spent = self._now() - start
            inner = stack.pop()
            if stack:
                stack[-1] += spent
            book = self.phases if threading.get_ident() == self.thread else self.overlapped
            with self._lock:
                book[name] = book.get(name, 0.0) + spent - inner

    def record(self) -> dict:
        """``{"wall_s", "phases" (with "other"), "overlapped"}``, seconds rounded to ms."""
        wall = self._now() - self.started
        with self._lock:
            phases, beside = dict(self.phases), dict(self.overlapped)
        phases["other"] = max(0.0, wall - sum(phases.values()))
        return {"wall_s": round(wall, 3), "phases": {k: round(v, 3) for k, v in phases.items()},
                "overlapped": {k: round(v, 3) for k, v in beside.items()}}


_current: contextvars.ContextVar[PhaseClock | None] = contextvars.ContextVar("bakery_phase_clock", default=None)


@contextlib.contextmanager
def recording() -> Iterator[PhaseClock]:
    """A fresh clock for one task; :func:`time` calls below it (on this thread, or on
    threads that run in a copy of this context) count towards it."""
    clock = PhaseClock()
    token = _current.set(clock)
    try:
        yield clock
    finally:
        _current.reset(token)


def time(name: str):
    """Counts the block's seconds towards phase ``name`` of the task being recorded; a
    no-op outside one (a benchmark calling stage code directly)."""
    clock = _current.get()
    return clock.time(name) if clock is not None else contextlib.nullcontext()


def log_line(clock: PhaseClock) -> str:
    """The task log's line for ``clock`` (what bench/library.py reads back)."""
    return PHASES_LOG_PREFIX + json.dumps(clock.record(), sort_keys=True)


def parse_log(text: str) -> dict | None:
    """The last phase record in a task's log text, or None."""
    found = None
    for line in text.splitlines():
        at = line.find(PHASES_LOG_PREFIX)
        if at >= 0:
            try:
                found = json.loads(line[at + len(PHASES_LOG_PREFIX):])
            except ValueError:
                continue
    return found
