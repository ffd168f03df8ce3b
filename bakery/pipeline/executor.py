"""Runs the planned tasks in order through the cache, keeps going past failures and
records every outcome.

Each task builds into an immutable cache entry (``run_task`` publishes it atomically,
then the entry is sealed with checksums) and is then copied into ``out/<stage>/<asset>``
by another atomic publish. Output folders are therefore always either the previous good
bundle or the new one, and a killed bake resumes from whatever entries were sealed.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from bakery.errors import BakeryError, DeviceError, UsageError
from bakery.pipeline.cache import (Cache, hash_slang_sources, key_of, key_parts, output_matches,
                                   sha256_file, why_rebuild)
from bakery.pipeline.config import Pipeline, display_path
from bakery.pipeline.graph import Task, build_tasks, select_tasks
from bakery.pipeline.lock import OutputLock
from bakery.pipeline.progress import StageProgress
from bakery.pipeline.report import BakeReport, TaskOutcome
from bakery.pipeline.task import run_task, staging_dir_for
from bakery.stages.base import StageInput

ALL_STAGES = "*"
REPORT_NAME = "bake-report.json"


@dataclass
class BakeOptions:
    force: Sequence[str] = ()          # stage names, or ALL_STAGES
    only: Sequence[str] = ()
    assets: Sequence[str] = ()         # fnmatch globs over asset names
    changed: Sequence[Path] | None = None
    dry_run: bool = False
    fail_fast: bool = False
    wait: bool = True
    device: str | None = None          # overrides [project] device
    report: Path | None = None
    bars: bool | None = None           # None: tqdm only on a terminal


class LazyDevice:
    """Opens the device on first use only, once per bake: pure-CPU pipelines never touch
    the GPU stack, and a GPU pipeline pays the opening cost once."""

    def __init__(self, kind: str, cache_dir: Path | None):
        self.kind, self.cache_dir = kind, cache_dir
        self.device: Any = None

    def __call__(self):
        if self.device is None:
            from bakery.device import open_device

            self.device = open_device(self.kind, cache_dir=self.cache_dir)
        return self.device

    def info(self) -> dict | None:
        return self.device.info.to_dict() if self.device is not None else None


@dataclass
class _Decision:
    key: str
    parts: dict
    action: str            # build | cached
    reason: str
    sums: dict | None = None
    corrupt: str = ""


@dataclass
class _State:
    outcomes: dict[str, TaskOutcome] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    stop: bool = False


def sweep_staging(*roots: Path) -> int:
    """Removes hidden staging folders left by a killed bake (only ever garbage) and
    finishes any publish a crash interrupted between its two renames."""
    from bakery.formats.publish import ASIDE_SUFFIX, recover

    n = 0
    for root in roots:
        if root.is_dir():
            for p in sorted(root.rglob(f"*{ASIDE_SUFFIX}")):
                recover(p.with_name(p.name[:-len(ASIDE_SUFFIX)]))
            for p in sorted(root.rglob(".*.staging-*"), reverse=True):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                    n += 1
    return n


class Executor:
    def __init__(self, pipe: Pipeline, opts: BakeOptions, log: logging.Logger):
        self.pipe, self.opts, self.log = pipe, opts, log
        self.cache = Cache(pipe.cache)
        kind = opts.device or pipe.device
        self.device = LazyDevice(kind, None if opts.dry_run else pipe.cache / "device")
        self._slang_hashes: dict[str, str] = {}
        force = set(opts.force)
        unknown = force - set(pipe.stages) - {ALL_STAGES}
        if unknown:
            raise UsageError(f"unknown stage {sorted(unknown)[0]!r} (stages: {', '.join(pipe.stages)})",
                             key="--force")
        self.force_all = ALL_STAGES in force
        self.force = force

    # -- planning -----------------------------------------------------------------
    def plan(self) -> list[Task]:
        return select_tasks(self.pipe, build_tasks(self.pipe), only=self.opts.only,
                            assets=self.opts.assets, changed=self.opts.changed)

    def _slang_hash(self, task: Task) -> str:
        cls = task.stage.stage_cls
        if cls.type_name not in self._slang_hashes:
            self._slang_hashes[cls.type_name] = hash_slang_sources(tuple(cls.slang_sources))
        return self._slang_hashes[cls.type_name]

    def _decide(self, task: Task, state: _State) -> _Decision:
        cls = task.stage.stage_cls
        parts = key_parts(
            stage_type=cls.type_name, stage_version=str(cls.version), asset=task.asset, params=task.stage.params,
            seed=task.stage.seed, inputs={r: sha256_file(p) for r, p in sorted(task.files.items())},
            upstream={d: state.keys[d] for d in task.deps}, slang=self._slang_hash(task),
            device_class=self.device().device_class if cls.uses_device else None)
        key = key_of(parts)
        record = self.cache.read_record(task.stage.name, task.asset)
        if self.force_all or task.stage.name in self.force:
            return _Decision(key, parts, "build", "forced")
        check = self.cache.check(key)
        if check.state == "ok":
            return _Decision(key, parts, "cached", "", sums=self.cache.sums(key))
        if check.state == "corrupt":
            return _Decision(key, parts, "build", f"corrupted cache entry ({check.detail}), rebuilt",
                             corrupt=check.detail)
        old = record["parts"] if record else None
        if record and record.get("key") == key:
            return _Decision(key, parts, "build", "cache entry missing")
        return _Decision(key, parts, "build", why_rebuild(old, parts))

    # -- running ------------------------------------------------------------------
    def run(self) -> BakeReport:
        tasks = self.plan()
        report = BakeReport(pipeline=display_path(self.pipe.path), out=display_path(self.pipe.out),
                            dry_run=self.opts.dry_run)
        if self.opts.changed is not None:
            known = self.pipe.input_files() | {self.pipe.path.resolve()}
            unused = [str(p) for p in self.opts.changed if Path(p).resolve() not in known]
            if unused:
                report.notes.append(f"--changed: {len(unused)} file(s) feed no task: {', '.join(unused[:5])}")
        t0 = time.monotonic()
        try:
            if self.opts.dry_run:
                self._run_all(tasks, report)
            else:
                with OutputLock(self.pipe.out, wait=self.opts.wait, say=self.log.warning):
                    swept = sweep_staging(self.pipe.out, self.cache.root / "entries")
                    if swept:
                        report.notes.append(f"removed {swept} staging folder(s) left by an interrupted bake")
                    try:
                        self._run_all(tasks, report)
                    finally:
                        report.seconds = time.monotonic() - t0
                        report.device = self.device.info()
                        report.write(self.pipe.out / REPORT_NAME)
                        if self.opts.report:
                            report.write(self.opts.report)
        finally:
            report.seconds = time.monotonic() - t0
            report.device = self.device.info()
        return report

    def _run_all(self, tasks: list[Task], report: BakeReport) -> None:
        state = _State()
        by_stage: dict[str, int] = {}
        for t in tasks:
            by_stage[t.stage.name] = by_stage.get(t.stage.name, 0) + 1
        progress: StageProgress | None = None
        try:
            for i, t in enumerate(tasks):
                if progress is None or progress.stage != t.stage.name:
                    if progress:
                        progress.close()
                    progress = StageProgress(t.stage.name, by_stage[t.stage.name], log=self.log,
                                             bars=self.opts.bars)
                outcome = self._one(t, state, progress)
                state.outcomes[t.id] = outcome
                report.tasks.append(outcome)
                progress.finished(t.asset, outcome.status, outcome.seconds, outcome.error or outcome.reason)
                if outcome.status == "failed" and self.opts.fail_fast:
                    state.stop = True
        except KeyboardInterrupt:
            done = {o.stage + "/" + o.asset for o in report.tasks}
            for t in tasks:
                if t.id not in done:
                    report.tasks.append(TaskOutcome(t.stage.name, t.asset, "skipped", reason="interrupted"))
            raise
        finally:
            if progress:
                progress.close()

    def _task_logger(self, t: Task) -> tuple[logging.Logger, logging.Handler | None, Path | None]:
        log = logging.getLogger(f"bakery.task.{t.stage.name}.{t.asset.replace('/', '.')}")
        if self.opts.dry_run:
            return log, None, None
        path = self.pipe.out / "logs" / t.stage.name / f"{t.asset}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        h = logging.FileHandler(path, mode="w", encoding="utf-8")
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.DEBUG)
        return log, h, path

    def _one(self, t: Task, state: _State, progress: StageProgress) -> TaskOutcome:
        o = TaskOutcome(t.stage.name, t.asset, "skipped", out_dir=display_path(t.out_dir(self.pipe.out)))
        if state.stop:
            o.reason = "not run: --fail-fast after a failure"
            return o
        for d in t.deps:
            if state.outcomes[d].status in ("failed", "skipped"):
                o.reason = f"upstream {d} {state.outcomes[d].status}"
                return o
        start = time.monotonic()
        try:
            dec = self._decide(t, state)
        except DeviceError:
            raise
        except (OSError, BakeryError) as e:
            o.status, o.error = "failed", f"cannot compute cache key: {e}"
            return o
        state.keys[t.id] = o.key = dec.key
        o.reason = dec.reason
        if self.opts.dry_run:
            o.status = "would-build" if dec.action == "build" else "cached"
            if dec.action == "cached" and not output_matches(t.out_dir(self.pipe.out), dec.sums or {}):
                o.reason = "cached; output folder would be restored"
            return o
        if dec.corrupt:
            self.log.warning("%s: corrupted cache entry %s (%s); rebuilding", t.id, dec.key[:12], dec.corrupt)
        sums = dec.sums
        if dec.action == "build":
            log, handler, log_path = self._task_logger(t)
            o.log = display_path(log_path) if log_path else None
            try:
                self.cache.discard(dec.key)
                upstream_bundles = self.cache.bundle_dir(state.keys[t.upstream.id]) if t.upstream else None
                inp = StageInput(t.asset, dict(t.files), upstream_bundles)
                run_task(t.stage.stage_cls, [inp], t.stage.params, seed=t.stage.seed,
                         device_provider=self.device, out_dir=self.cache.bundle_dir(dec.key), log=log,
                         progress=progress.task_callback(t.asset), where=t.id)
                sums = self.cache.seal(dec.key)
            except DeviceError:
                raise
            except BakeryError as e:
                log.error("%s", e.one_line())
                o.status, o.error, o.seconds = "failed", e.one_line(), time.monotonic() - start
                return o
            except OSError as e:  # sealing the cache entry: disk full, permissions
                msg = f"{t.id}: cannot write cache entry: {e}"
                log.error("%s", msg)
                o.status, o.error, o.seconds = "failed", msg, time.monotonic() - start
                return o
            finally:
                if handler:
                    log.removeHandler(handler)
                    handler.close()
            o.status = "built"
        else:
            o.status = "cached"
        out_dir = t.out_dir(self.pipe.out)
        try:
            if not output_matches(out_dir, sums):
                if dec.action == "cached":
                    o.reason = "output folder restored from cache"
                self._materialize(self.cache.bundle_dir(dec.key), out_dir)
            self.cache.write_record(t.stage.name, t.asset, dec.key, dec.parts)
        except OSError as e:  # disk full, permissions: this task fails, the bake goes on
            o.status, o.error = "failed", f"{t.id}: cannot write output: {e}"
            o.seconds = time.monotonic() - start
            return o
        o.metrics = _read_metrics(self.cache.bundle_dir(dec.key))
        o.outputs = [{"path": display_path(out_dir / rel), "bytes": size, "sha256": digest}
                     for rel, (size, digest) in sorted(sums.items())]
        o.seconds = time.monotonic() - start
        return o

    def _materialize(self, bundle: Path, out_dir: Path) -> None:
        """Copies a sealed entry into the output folder with an atomic replace."""
        from bakery.formats.bundle import atomic_publish

        staging = staging_dir_for(out_dir)
        try:
            shutil.copytree(bundle, staging, dirs_exist_ok=True)
            atomic_publish(staging, out_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _read_metrics(bundle: Path) -> dict:
    import json

    try:
        return dict(json.loads((bundle / "manifest.json").read_text()).get("metrics") or {})
    except (OSError, ValueError, AttributeError):
        return {}


def bake(pipe: Pipeline, opts: BakeOptions, log: logging.Logger | None = None) -> BakeReport:
    """Plans and runs a bake; see :class:`BakeOptions`."""
    return Executor(pipe, opts, log or logging.getLogger("bakery.bake")).run()
