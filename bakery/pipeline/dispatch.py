"""Running a DAG of task specs on workers in other processes or on other machines.

:class:`DagRunner` is the part every such runner shares: it decides cached or build on
the driver (as :class:`~bakery.pipeline.runner.LocalRunner` does), hands a task to a
:class:`Backend` as soon as every task it reads has been built or found cached, so
independent tasks run at once, and turns what comes back into the same events. Where the
workers share no folder with the driver, a task travels as a :func:`pack`: its spec, its
source files and its upstream bundles as bytes, and the built bundle comes back as bytes;
the driver then seals the entry itself. Either way the driver's cache ends up with every
entry sealed once (:meth:`Cache.put <bakery.pipeline.cache.Cache.put>`), and publishing
into ``out/`` stays the executor's.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from bakery.errors import DeviceError, UsageError
from bakery.pipeline.cache import Cache
from bakery.pipeline.dag import critical_path_first
from bakery.pipeline.runner import Event, decide
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.worker import Attempt, DevicePool, build_captured, read_tree, write_tree

#: What a task may be in when its dependants look at it.
DONE = ("built", "cached")


@dataclass
class Job:
    """One submitted task, as the backend got it."""

    spec: TaskSpec
    forced: bool
    payload: dict            # see :func:`pack`
    reason: str = ""
    started: float = field(default_factory=time.monotonic)


class Backend(Protocol):
    """Where tasks run. ``wait`` blocks until at least one job ends and returns each
    ended job with its :class:`Attempt`, or the exception that lost it (a worker that
    died more often than it may be retried)."""

    def can_take(self, spec: TaskSpec) -> bool: ...

    def submit(self, job: Job) -> None: ...

    def wait(self) -> list[tuple[Job, Attempt | BaseException]]: ...

    def close(self, *, cancel: bool) -> None: ...


def expected_seconds(specs: Sequence[TaskSpec], cache: Cache) -> dict[str, float]:
    """How long each task is expected to build: its last build's seconds (the cache's
    record of the stage and asset, whatever key it had), else the mean of its stage's
    recorded tasks, else its stage type's ``typical_seconds``."""
    from bakery.stages import get_stage

    recorded: dict[str, float] = {}
    for spec in specs:
        seconds = (cache.read_record(spec.stage, spec.asset) or {}).get("build_seconds")
        if isinstance(seconds, (int, float)):
            recorded[spec.id] = float(seconds)
    by_stage: dict[str, list[float]] = {}
    for spec in specs:
        if spec.id in recorded:
            by_stage.setdefault(spec.stage, []).append(recorded[spec.id])
    out = {}
    for spec in specs:
        if spec.id in recorded:
            out[spec.id] = recorded[spec.id]
        elif spec.stage in by_stage:
            out[spec.id] = sum(by_stage[spec.stage]) / len(by_stage[spec.stage])
        else:
            try:
                out[spec.id] = float(get_stage(spec.stage_type).typical_seconds)
            except UsageError:  # planned with a plugin this process has not loaded
                out[spec.id] = 0.0
    return out


def longest_chains_first(specs: Sequence[TaskSpec], seconds: dict[str, float]) -> list[TaskSpec]:
    """``specs`` by the longest expected chain of builds they start, longest first
    (dag.critical_path_first), so the bake's wall time is not a slow task started last
    while the short ones kept the workers busy."""
    by_id = {s.id: s for s in specs}
    return [by_id[i] for i in critical_path_first({s.id: list(s.deps) for s in specs}, seconds.__getitem__)]


class StageShares:
    """Which stage type's task a free worker takes next, among tasks no other task waits
    for (those keep their place by their chains): each type runs on a share of the busy workers
    in proportion to the expected seconds of its unfinished tasks, so every type drains
    at the same pace. Types lean on different parts of a machine (ntc on the host's cores,
    mipmap on the GPU), and a library baked a stage at a time left the GPU half idle
    through the host-bound stretch (bench/library.py); in proportion, they overlap from
    start to end, and the last tasks to finish are not one type's queue."""

    def __init__(self, specs: Sequence[TaskSpec], seconds: dict[str, float]):
        self.seconds = seconds
        self.type_of = {s.id: s.stage_type for s in specs}
        self.left: dict[str, float] = {}
        for s in specs:
            self.left[s.stage_type] = self.left.get(s.stage_type, 0.0) + max(seconds[s.id], 1e-3)
        self.running: dict[str, int] = {}

    def order(self, types: Sequence[str]) -> list[str]:
        """``types`` by how far each runs below its share once one more worker is busy,
        furthest first (ties keep ``types``' order)."""
        total = sum(self.left.values()) or 1.0
        busy = sum(self.running.values()) + 1
        deficit = {t: busy * self.left.get(t, 0.0) / total - self.running.get(t, 0) for t in types}
        return sorted(types, key=lambda t: -deficit[t])

    def started(self, task_id: str) -> None:
        t = self.type_of[task_id]
        self.running[t] = self.running.get(t, 0) + 1

    def ended(self, task_id: str, *, ran: bool) -> None:
        """A task is settled: ``ran`` if it had a worker (built or failed there)."""
        t = self.type_of[task_id]
        self.left[t] = max(0.0, self.left[t] - max(self.seconds[task_id], 1e-3))
        if ran:
            self.running[t] -= 1


class ReadyTasks:
    """The tasks whose upstream tasks in the bake have all settled, kept in hand-out order
    as they become so: a hand-out looks at the first few (:meth:`in_order`), not at every
    waiting task (a library of thousands: a pass over all of them per
    hand-out was 39 s of scheduling for 9000 tasks)."""

    def __init__(self, ordered: Sequence[TaskSpec]):
        self.by_id = {s.id: s for s in ordered}
        self._ordered = [s.id for s in ordered]
        self.position = {s.id: i for i, s in enumerate(ordered)}
        self.blockers: dict[str, int] = {}
        self.dependants: dict[str, list[str]] = {}
        for s in ordered:
            upstream = {d for d in s.deps if d in self.position}
            self.blockers[s.id] = len(upstream)
            for d in upstream:
                self.dependants.setdefault(d, []).append(s.id)
        self.awaited = set(self.dependants)   # tasks others wait for: their chains go first
        self._first: list[int] = []      # positions of ready tasks others wait for
        self._leaves: list[int] = []     # positions of the other ready tasks
        self._by_type: dict[str, list[int]] = {}         # the latter by stage type
        self._first_by_type: dict[str, list[int]] = {}   # the former by stage type
        self.waiting = len(ordered)      # neither handed out nor settled
        for s in ordered:
            if not self.blockers[s.id]:
                self._add(s)

    def _add(self, spec: TaskSpec) -> None:
        at = self.position[spec.id]
        if spec.id in self.awaited:
            bisect.insort(self._first, at)
            bisect.insort(self._first_by_type.setdefault(spec.stage_type, []), at)
        else:
            bisect.insort(self._leaves, at)
            bisect.insort(self._by_type.setdefault(spec.stage_type, []), at)

    def leaf_types(self) -> list[str]:
        """Stage types with a ready task nothing waits for, by the place of their first
        ready task of any kind (the order StageShares.order keeps for ties)."""
        def first(t: str) -> int:
            return min(self._by_type[t][:1] + self._first_by_type.get(t, [])[:1])
        return sorted((t for t, at in self._by_type.items() if at), key=first)

    def in_order(self, type_order: Sequence[str]) -> Iterator[TaskSpec]:
        """The tasks ready now, longest chain first, lazily: a task others wait for keeps its
        place, and the places of the rest go to them by ``type_order`` (StageShares.order),
        each type's by chain; so shares decide which such task goes, never that it goes
        before a longer chain of builds. Those that become ready meanwhile come in the
        next call."""
        ordered = self._ordered
        by_type = {t: list(self._by_type.get(t, ())) for t in type_order}
        leaves = (at for t in type_order for at in by_type[t])
        first, slots = list(self._first), list(self._leaves)
        i = j = 0
        while i < len(first) or j < len(slots):
            if j >= len(slots) or (i < len(first) and first[i] < slots[j]):
                yield self.by_id[ordered[first[i]]]
                i += 1
            else:
                yield self.by_id[ordered[next(leaves)]]
                j += 1

    def remove(self, spec: TaskSpec) -> None:
        """``spec`` is handed out or settled without a worker."""
        at = self.position[spec.id]
        if spec.id in self.awaited:
            del self._first[bisect.bisect_left(self._first, at)]
            of_type = self._first_by_type[spec.stage_type]
            del of_type[bisect.bisect_left(of_type, at)]
        else:
            del self._leaves[bisect.bisect_left(self._leaves, at)]
            of_type = self._by_type[spec.stage_type]
            del of_type[bisect.bisect_left(of_type, at)]
        self.waiting -= 1

    def a_blocked_task(self) -> str:
        """A waiting task that is not ready (for an error message)."""
        return next((i for i in self._ordered if self.blockers[i]), "?")

    def settled(self, task_id: str) -> None:
        """``task_id`` ended (built, cached, failed or skipped): its dependants may be ready."""
        for d in self.dependants.get(task_id, ()):
            self.blockers[d] -= 1
            if not self.blockers[d]:
                self._add(self.by_id[d])


def pack(spec: TaskSpec, cache: Cache, *, ship_files: bool, replace: bool) -> dict:
    """A task as plain data for a worker. With ``ship_files`` its source files and
    upstream bundles ride along (workers that see none of the driver's folders)."""
    payload: dict[str, Any] = {"spec": spec.to_dict(), "replace": replace, "sources": None, "upstream": None}
    if ship_files:
        payload["sources"] = {path: Path(path).read_bytes() for i in spec.inputs for path in i.files.values()}
        payload["upstream"] = {i.upstream_key: read_tree(cache.bundle_dir(i.upstream_key))
                               for i in spec.inputs if i.upstream_key}
    return payload


def run_packed(payload: dict, devices: DevicePool, shared_cache: str | None) -> Attempt:
    """The worker's side of :func:`pack`: builds the task into ``shared_cache`` (a path
    every node sees) or, for a shipped task, in a scratch cache, returning the bytes."""
    spec = TaskSpec.from_dict(payload["spec"])
    if payload["sources"] is None:
        if shared_cache is None:
            raise ValueError("a task without its files needs a shared cache")
        return build_captured(spec, Cache(Path(shared_cache)), devices, replace=payload["replace"])
    with tempfile.TemporaryDirectory(prefix="bakery-task-") as tmp:
        scratch = Cache(Path(tmp) / "cache")
        for key, files in payload["upstream"].items():
            scratch.put(key, lambda folder, files=files: write_tree(files, folder))
        inputs = []
        for n, i in enumerate(spec.inputs):
            local = {}
            for role, path in i.files.items():
                # Keep the file name: stages may read its extension.
                p = Path(tmp) / "src" / str(n) / role / Path(path).name
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(payload["sources"][path])
                local[role] = str(p)
            inputs.append(dataclasses.replace(i, files=local))
        spec = dataclasses.replace(spec, inputs=tuple(inputs))
        return build_captured(spec, scratch, devices, return_files=True)


@dataclass
class DagRunner:
    """A :class:`~bakery.pipeline.runner.Runner` over a :class:`Backend`."""

    cache: Cache
    backend: Backend
    log: logging.Logger
    log_dir: Path | None = None
    ship_files: bool = False          # workers see none of the driver's folders
    device: dict | None = None        # the last worker device seen (bake report)

    def run(self, specs: Sequence[TaskSpec], *, forced: Callable[[TaskSpec], bool] = lambda s: False
            ) -> Iterator[Event]:
        state: dict[str, str] = {}
        seconds = expected_seconds(specs, self.cache)
        shares = StageShares(specs, seconds)
        ready = ReadyTasks(longest_chains_first(specs, seconds))
        running = 0
        builds: dict[str, str] = {}  # task id -> why it builds, decided once
        finished = False
        try:
            while ready.waiting or running:
                moved = False
                progressed = True
                while progressed:  # a pass settles what needs no worker and starts one task
                    progressed = False
                    for spec in ready.in_order(shares.order(ready.leaf_types())):
                        if spec.id in builds:
                            event, reason = None, builds[spec.id]
                        else:
                            event, reason = self._settle(spec, state, forced(spec))
                            if event is None:
                                builds[spec.id] = reason
                        if event is None and not self.backend.can_take(spec):
                            continue
                        ready.remove(spec)
                        moved = progressed = True
                        if event is None:
                            try:
                                payload = pack(spec, self.cache, ship_files=self.ship_files, replace=forced(spec))
                            except OSError as e:
                                event = Event("failed", spec.id, reason=reason,
                                              error=f"{spec.id}: cannot read input: {e}")
                        if event is not None:
                            state[spec.id] = event.kind
                            shares.ended(spec.id, ran=False)
                            ready.settled(spec.id)
                            yield event
                            continue
                        yield Event("started", spec.id, reason=reason)
                        self.backend.submit(Job(spec, forced(spec), payload, reason=reason))
                        shares.started(spec.id)
                        running += 1
                        break  # the shares moved: rank again
                if not running:
                    if not moved:
                        raise RuntimeError(f"cannot schedule {ready.a_blocked_task()}: its upstream tasks are not planned")
                    continue
                for job, result in self.backend.wait():
                    running -= 1
                    event = self._finish(job, result)
                    state[job.spec.id] = event.kind
                    shares.ended(job.spec.id, ran=True)
                    ready.settled(job.spec.id)
                    yield event
            finished = True
        finally:
            self.backend.close(cancel=not finished)

    def _settle(self, spec: TaskSpec, state: dict[str, str], forced: bool) -> tuple[Event | None, str]:
        """The event of a task that needs no worker (skipped, unplannable, cached), or
        None and the reason it builds."""
        bad = next((d for d in spec.deps if state.get(d, "built") not in DONE), None)
        if bad is not None:
            return Event("skipped", spec.id, reason=f"upstream {bad} {state[bad]}"), ""
        if spec.error:
            return Event("failed", spec.id, error=f"{spec.id}: {spec.error}"), ""
        start = time.monotonic()
        try:
            dec = decide(spec, self.cache, forced=forced)
        except OSError as e:
            return Event("failed", spec.id, error=f"{spec.id}: cannot read the cache: {e}"), ""
        if dec.action == "cached":
            return Event("cached", spec.id, sums=dec.sums, seconds=time.monotonic() - start), ""
        if dec.corrupt:
            self.log.warning("%s: corrupted cache entry %s (%s); rebuilding", spec.id, spec.key[:12], dec.corrupt)
        return None, dec.reason

    def _finish(self, job: Job, result: Attempt | BaseException) -> Event:
        spec = job.spec
        seconds = time.monotonic() - job.started
        if isinstance(result, BaseException):
            first = (str(result).strip().splitlines() or [""])[0]
            return Event("failed", spec.id, reason=job.reason, seconds=seconds,
                         error=f"{spec.id}: worker lost ({type(result).__name__}: {first[:200]})")
        if result.device:
            self.device = result.device
        log_path = self._write_log(spec, result.log)
        if result.status == "device-error":
            raise DeviceError(f"worker for {spec.id}: {result.error}")
        if result.status != "built":
            return Event("failed", spec.id, error=result.error, reason=job.reason, seconds=seconds, log=log_path)
        try:
            if result.files is not None:
                sums = self.cache.put(spec.key, lambda folder: write_tree(result.files, folder), replace=job.forced)
            else:
                sums = self.cache.sums(spec.key)
                if sums != result.sums:
                    return Event("failed", spec.id, reason=job.reason, seconds=seconds, log=log_path,
                                 error=f"{spec.id}: the worker's cache entry is not in {self.cache.root}: "
                                       "the shared cache must be the same folder on every node")
        except OSError as e:
            return Event("failed", spec.id, error=f"{spec.id}: cannot write cache entry: {e}", reason=job.reason,
                         seconds=seconds, log=log_path)
        return Event("built", spec.id, reason=job.reason, sums=sums, seconds=seconds, log=log_path)

    def _write_log(self, spec: TaskSpec, text: str) -> Path | None:
        if self.log_dir is None:
            return None
        from bakery.pipeline.task_log import open_task_log

        try:
            path, f = open_task_log(self.log_dir, spec.stage, spec.asset, spec.id)
            with f:
                f.write(text)
        except OSError as e:
            self.log.warning("%s: cannot write its log: %s", spec.id, e)
            return None
        return path
