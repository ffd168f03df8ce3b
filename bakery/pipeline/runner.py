"""Runners execute planned :class:`TaskSpec` records and report what happens as events.

A runner decides per task whether the cache already holds it, builds what is missing
in dependency order, and yields one lifecycle :class:`Event` per step (started, built,
cached, failed, skipped); progress inside a task goes to the ``progress`` callback it was
given. It never touches ``out/``: publishing and the report are the executor's.
:class:`LocalRunner` builds in this process; another runner (a process pool, a
cluster) need only honour the same contract.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from bakery.errors import BakeryError, DeviceError
from bakery.pipeline.cache import Cache, why_rebuild
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.worker import DevicePool, build

#: Event kinds, in the order a task can go through them.
EVENTS = ("started", "built", "cached", "failed", "skipped")


@dataclass
class Event:
    kind: str                      # one of EVENTS
    task: str                      # task id
    reason: str = ""               # why it builds, why it was skipped, what was restored
    error: str = ""                # one-line failure message
    seconds: float = 0.0
    sums: dict | None = None       # the cache entry's checksums (built, cached)
    log: Path | None = None        # the task's log file, when it built


@dataclass
class Decision:
    """Whether a task's entry is reusable, and why it is not when it is not."""

    action: str            # build | cached
    reason: str = ""
    sums: dict | None = None
    corrupt: str = ""


def decide(spec: TaskSpec, cache: Cache, *, forced: bool) -> Decision:
    """Cached or build, with the reason a person would want (shared by the dry run)."""
    if forced:
        return Decision("build", "forced")
    check = cache.check(spec.key)
    if check.state == "ok":
        return Decision("cached", sums=cache.sums(spec.key))
    if check.state == "corrupt":
        return Decision("build", f"corrupted cache entry ({check.detail}), rebuilt", corrupt=check.detail)
    record = cache.read_record(spec.stage, spec.asset)
    if record and record.get("key") == spec.key:
        return Decision("build", "cache entry missing")
    return Decision("build", why_rebuild(record["parts"] if record else None, spec.parts))


class Runner(Protocol):
    def run(self, specs: Sequence[TaskSpec], *, forced: Callable[[TaskSpec], bool]) -> Iterator[Event]:
        """Runs ``specs`` (in dependency order) and yields their events."""


@dataclass
class LocalRunner:
    """Builds tasks one after another in this process, on one device per kind."""

    cache: Cache
    devices: DevicePool
    log: logging.Logger
    log_dir: Path | None = None
    progress: Callable[[TaskSpec], Callable[..., Any] | None] = lambda spec: None
    _unbuilt: dict[str, str] = field(default_factory=dict)  # task id -> failed | skipped

    def run(self, specs: Sequence[TaskSpec], *, forced: Callable[[TaskSpec], bool] = lambda s: False) -> Iterator[Event]:
        for spec in specs:
            bad = next((d for d in spec.deps if d in self._unbuilt), None)
            if bad is not None:
                event = Event("skipped", spec.id, reason=f"upstream {bad} {self._unbuilt[bad]}")
            elif spec.error:
                event = Event("failed", spec.id, error=f"{spec.id}: {spec.error}")
            else:
                event = yield from self._one(spec, forced(spec))
            if event.kind in ("failed", "skipped"):
                self._unbuilt[spec.id] = event.kind
            yield event

    def _one(self, spec: TaskSpec, forced: bool) -> Iterator[Event]:
        start = time.monotonic()
        try:
            dec = decide(spec, self.cache, forced=forced)
        except OSError as e:
            return Event("failed", spec.id, error=f"{spec.id}: cannot read the cache: {e}")
        if dec.action == "cached":
            return Event("cached", spec.id, sums=dec.sums, seconds=time.monotonic() - start)
        if dec.corrupt:
            self.log.warning("%s: corrupted cache entry %s (%s); rebuilding", spec.id, spec.key[:12], dec.corrupt)
        yield Event("started", spec.id, reason=dec.reason)
        try:
            log, handler, log_path = self._task_logger(spec)
        except OSError as e:  # a link planted in out/logs, a full disk: this task fails, in one line
            return Event("failed", spec.id, error=f"{spec.id}: cannot write its log: {e}", reason=dec.reason,
                         seconds=time.monotonic() - start)
        try:
            sums = build(spec, self.cache, self.devices, log=log, progress=self.progress(spec), replace=forced)
        except DeviceError:
            raise  # no device: nothing else can build either
        except BakeryError as e:
            log.error("%s", e.one_line())
            return Event("failed", spec.id, error=e.one_line(), reason=dec.reason,
                         seconds=time.monotonic() - start, log=log_path)
        except OSError as e:  # sealing the cache entry: disk full, permissions
            msg = f"{spec.id}: cannot write cache entry: {e}"
            log.error("%s", msg)
            return Event("failed", spec.id, error=msg, reason=dec.reason, seconds=time.monotonic() - start,
                         log=log_path)
        finally:
            if handler:
                log.removeHandler(handler)
                handler.close()
                with contextlib.suppress(OSError):   # a full disk: the lines it holds are lost, quietly
                    handler.stream.close()
        return Event("built", spec.id, reason=dec.reason, sums=sums, seconds=time.monotonic() - start,
                     log=log_path)

    def _task_logger(self, spec: TaskSpec) -> tuple[logging.Logger, logging.Handler | None, Path | None]:
        log = logging.getLogger(f"bakery.task.{spec.stage}.{spec.asset.replace('/', '.')}")
        if not any(isinstance(f, NamesTask) for f in log.filters):
            log.addFilter(NamesTask(spec.id, spec.asset))
        if self.log_dir is None:
            return log, None, None
        from bakery.pipeline.task_log import TaskLogHandler, open_task_log

        path, stream = open_task_log(self.log_dir, spec.stage, spec.asset, spec.id)
        h = TaskLogHandler(stream)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.DEBUG)
        return log, h, path


class NamesTask(logging.Filter):
    """Every line a task logs starts with its id (``compress/materials/bricks: ...``), so
    interleaved bakes stay readable; a stage's own ``asset: `` prefix becomes the id."""

    def __init__(self, task_id: str, asset: str):
        super().__init__()
        self.task_id, self.asset = task_id, asset

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if msg.startswith(f"{self.task_id}: "):
            return True
        if msg.startswith(f"{self.asset}: "):
            msg = msg[len(self.asset) + 2:]
        record.msg, record.args = f"{self.task_id}: {msg}", ()
        return True

