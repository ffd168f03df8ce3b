"""The executor orchestrates a bake: plan, hand the specs to a runner, publish what the
runner built or found cached into ``out/``, and report.

Each task builds into an immutable cache entry (sealed with checksums) and is then
copied into ``out/<stage>/<asset>`` by an atomic publish. Output folders are therefore
always either the previous good bundle or the new one, and a killed bake resumes from
whatever entries were sealed. Planning is :mod:`bakery.pipeline.planner`, building is a
:class:`~bakery.pipeline.runner.Runner`; this module only wires them together.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bakery.errors import UsageError, did_you_mean
from bakery.pipeline.cache import Cache, output_matches
from bakery.pipeline.config import Pipeline, display_path
from bakery.pipeline.fingerprint import FINGERPRINT_MEMO
from bakery.pipeline.gates import first_failure
from bakery.pipeline.graph import build_tasks, source_files
from bakery.pipeline.html_report import HTML_REPORT_NAME, SectionsAhead, task_dirs, write_html_report
from bakery.pipeline.lock import OutputLock
from bakery.pipeline.ownership import claim_bake_folders
from bakery.pipeline.planner import PlanOptions, plan
from bakery.progress import BakeCount, StageProgress
from bakery.pipeline.report import BakeReport, TaskOutcome
from bakery.pipeline.runner import Event, LocalRunner, decide
from bakery.pipeline.safety import check_report_target, forget_report
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.task import staging_dir_for
from bakery.pipeline.worker import DevicePool
from bakery.stages.params import Settings

ALL_STAGES = "*"
AUTO_JOBS = "auto"
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
    runner: str | None = None          # local | ray; overrides [project] runner
    jobs: int | str = 1                # local runner: tasks at once, in worker processes; or "auto"
    address: str | None = None         # ray: None starts a local cluster; auto | ray://HOST:PORT
    shared_cache: bool = False         # ray: workers build into the cache folder (same path on every node)
    max_retries: int = 2               # ray, --jobs: times a task whose worker died runs again
    verify_determinism: bool = False   # bake every task again in a fresh process, compare bytes


def sweep_staging(*roots: Path) -> int:
    """Removes the staging folders killed bakes left (named with their maker's pid, which
    is no longer running: only ever garbage) and finishes any publish a crash interrupted
    between its two renames. Folders of a person's that merely look alike stay."""
    from bakery.formats.publish import ASIDE_SUFFIX, recover, stale_staging

    n = 0
    for root in roots:
        if root.is_dir() and not root.is_symlink():
            for p in sorted(root.rglob(f"*{ASIDE_SUFFIX}")):
                recover(p.with_name(p.name[:-len(ASIDE_SUFFIX)]))
            parents = {root} | {p.parent for p in root.rglob(".*.staging-*")}
            for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
                for p in stale_staging(parent):
                    shutil.rmtree(p, ignore_errors=True)
                    n += 1
    return n


class Executor:
    def __init__(self, pipe: Pipeline, opts: BakeOptions, log: logging.Logger):
        self.pipe, self.opts, self.log = pipe, opts, log
        self.cache = Cache(pipe.cache)
        self.devices = DevicePool(pipe.cache / "device")
        force = set(opts.force)
        unknown = force - set(pipe.stages) - {ALL_STAGES}
        if unknown:
            bad = sorted(unknown)[0]
            raise UsageError(f"unknown stage {bad!r}{did_you_mean(bad, pipe.stages)} (stages: {', '.join(pipe.stages)})"
                             + _pipeline_hint(bad), key="--force")
        self.force_all = ALL_STAGES in force
        self.force = force
        self.runner_kind = opts.runner or pipe.runner
        if opts.jobs != AUTO_JOBS and (not isinstance(opts.jobs, int) or opts.jobs < 1):
            raise UsageError(f"--jobs must be a whole number of at least 1 or 'auto', got {opts.jobs!r}",
                             key="--jobs")
        if opts.dry_run and opts.verify_determinism:   # it would check nothing and say nothing
            raise UsageError("bakes every task a second time; --dry-run bakes none", key="--verify-determinism")
        if self.runner_kind == "ray" and not opts.dry_run:
            from bakery.pipeline.ray_runner import require_ray

            require_ray(private=opts.address is None)
        self.runner = None
        self._all_specs: list[TaskSpec] = []  # tasks outside this bake whose bundles the report shows
        self._sections: SectionsAhead | None = None  # report sections drawn while the bake goes on

    @property
    def _fingerprint_memo(self) -> Path | None:
        """Where planning keeps code fingerprints between bakes; a dry run writes nothing."""
        return None if self.opts.dry_run else self.cache.root / FINGERPRINT_MEMO

    def forced(self, spec: TaskSpec) -> bool:
        return self.force_all or spec.stage in self.force

    def plan(self) -> list[TaskSpec]:
        o = self.opts
        return plan(self.pipe, PlanOptions(only=o.only, assets=o.assets, changed=o.changed, device=o.device,
                                           fingerprint_memo=self._fingerprint_memo))

    # -- running ------------------------------------------------------------------
    def run(self) -> BakeReport:
        specs = self.plan()
        report = BakeReport(pipeline=display_path(self.pipe.path), out=display_path(self.pipe.out),
                            dry_run=self.opts.dry_run)
        if self.opts.changed is not None:
            known = source_files(build_tasks(self.pipe)) | {self.pipe.path.resolve()}
            unused = [str(p) for p in self.opts.changed if Path(p).resolve() not in known]
            if unused:
                report.notes.append(f"--changed: {len(unused)} file(s) feed no task: {', '.join(unused[:5])}")
        t0 = time.monotonic()
        if self.opts.dry_run:
            report.tasks = [self._dry_run(s) for s in specs]
            report.seconds = time.monotonic() - t0
            return report
        check_report_target(self.opts.report)
        with OutputLock(self.pipe.out, wait=self.opts.wait, say=self.log.warning):
            claim_bake_folders(self.pipe.out, self.pipe.cache, self.pipe.stages)
            forget_report(self.pipe.out / REPORT_NAME, self.pipe.out / HTML_REPORT_NAME, self.opts.report)
            swept = sweep_staging(self.pipe.out, self.cache.root / "entries")
            if swept:
                report.notes.append(f"removed {swept} staging folder(s) left by an interrupted bake")
            self._sections = SectionsAhead(task_dirs(specs), self.cache.root / "report", self.pipe.out)
            ended = False
            try:
                self._run_all(specs, report)
                if self.opts.verify_determinism and not report.failed:
                    self._verify(specs, report)
                if runs_a_subset(self.opts):
                    try:
                        self._keep_the_others(specs, report)
                    except Exception as e:  # noqa: BLE001 - the report's completeness never costs the bake
                        self.log.warning("the report lists only this bake's tasks: %s: %s", type(e).__name__, e)
                self._warn_losses(report)
                ended = True
            finally:
                try:
                    self._sections.finish(cancel=not ended)   # a signal while it waits still gets the report
                finally:
                    report.seconds = time.monotonic() - t0
                    report.device = self.devices.info() or getattr(self.runner, "device", None)
                    report.write(self.pipe.out / REPORT_NAME)
                    if self.opts.report:
                        report.write(self.opts.report)
                    self._write_html(report, specs)
        return report

    def _keep_the_others(self, specs: list[TaskSpec], report: BakeReport) -> None:
        """A bake of some tasks (``--only``, ``--asset``, ``--changed``) leaves the others'
        bundles in out/; the report lists them too, so it says what out/ holds, not what
        the last command did. In pipeline order; their bundles are not rebuilt or checked."""
        ran = {s.id for s in specs}
        every = plan(self.pipe, PlanOptions(device=self.opts.device, fingerprint_memo=self._fingerprint_memo))
        done = {(o.stage, o.asset): o for o in report.tasks}
        tasks = []
        for s in every:
            if s.id in ran:
                tasks.append(done[(s.stage, s.asset)])
                continue
            self._all_specs.append(s)
            tasks.append(self._kept(s))
        report.tasks = tasks

    def _kept(self, spec: TaskSpec) -> TaskOutcome:
        out_dir = Path(spec.out_dir)
        o = TaskOutcome(spec.stage, spec.asset, "skipped", key=spec.key or None, out_dir=display_path(out_dir),
                        stage_type=spec.stage_type, in_this_bake=False)
        manifest = _read_manifest(out_dir)
        if not manifest:
            o.reason = "not in this bake; out/ holds no bundle for it yet"
            return o
        sums = self.cache.sums(spec.key) if spec.key else None
        if sums is None or not output_matches(out_dir, sums):
            o.reason = "not in this bake; out/ holds an older bundle (its inputs or params changed since)"
            o.key = None  # no section memo for a bundle no key describes
        else:
            o.status, o.reason = "cached", "not in this bake; out/ holds its current bundle"
            o.seconds = self._build_seconds(spec) or 0.0
        o.metrics = dict(manifest.get("metrics") or {})
        o.verdict = self._verdict(spec.stage_type, manifest)
        return o

    def _verdict(self, stage_type: str, manifest: dict) -> dict | None:
        """The stage's judgement of its bundle against its baseline (its ``judge`` hook)."""
        from bakery.stages import get_stage

        try:
            v = get_stage(stage_type).judge(manifest)
        except Exception as e:  # noqa: BLE001 - a malformed record costs the verdict, not the bake
            self.log.warning("%s: no verdict against the baseline: %s", stage_type, e)
            return None
        return v.to_dict() if v is not None else None

    def _build_seconds(self, spec: TaskSpec) -> float | None:
        """How long the bundle now cached took to build, from the task's cache record."""
        record = self.cache.read_record(spec.stage, spec.asset) or {}
        if record.get("key") == spec.key and isinstance(record.get("build_seconds"), (int, float)):
            return float(record["build_seconds"])
        return None

    def _warn_losses(self, report: BakeReport) -> None:
        """A result worse than what a studio ships without it is never silent."""
        from bakery.pipeline.report import verdict_line

        for o in report.tasks:
            if o.loses:
                self.log.warning("%s/%s loses to its baseline: %s", o.stage, o.asset, verdict_line(o.verdict))

    def _verify(self, specs: list[TaskSpec], report: BakeReport) -> None:
        """--verify-determinism: every task that built or was cached, baked again."""
        from bakery.pipeline.determinism import verify_determinism

        done = {(o.stage, o.asset) for o in report.tasks if o.status in ("built", "cached")}
        report.determinism = verify_determinism([s for s in specs if (s.stage, s.asset) in done], self.cache,
                                                self.devices.cache_dir, self.log).to_dict()

    def _write_html(self, report: BakeReport, specs: list[TaskSpec]) -> None:
        """out/report.html; a plot that cannot be drawn costs a warning, never the bake."""
        try:
            write_html_report(report, task_dirs(specs + self._all_specs), self.pipe.out / HTML_REPORT_NAME,
                              memo=self.cache.root / "report")
        except Exception as e:  # noqa: BLE001
            self.log.warning("report.html not written: %s: %s", type(e).__name__, e)

    def _dry_run(self, spec: TaskSpec) -> TaskOutcome:
        o = TaskOutcome(spec.stage, spec.asset, "would-build", key=spec.key or None,
                        out_dir=display_path(Path(spec.out_dir)), **_settings_of(spec))
        if spec.error:
            o.status, o.error = "failed", f"{spec.id}: {spec.error}"
            return o
        dec = decide(spec, self.cache, forced=self.forced(spec))
        o.reason = dec.reason
        if o.auto:  # the values ``auto`` stands for, as the key and the manifest see them
            o.reason += "; " + " ".join(f"{k}={o.params[k]}" for k in o.auto)
        if dec.action == "cached":
            o.status = "cached"
            if not output_matches(Path(spec.out_dir), dec.sums or {}):
                o.reason = "cached; output folder would be restored"
        return o

    def _run_all(self, specs: list[TaskSpec], report: BakeReport) -> None:
        by_id = {s.id: s for s in specs}
        outcomes: dict[str, TaskOutcome] = {}
        counts: dict[str, int] = {}
        for s in specs:
            counts[s.stage] = counts.get(s.stage, 0) + 1
        shown: dict[str, StageProgress] = {}
        overall = BakeCount(len(specs))

        def progress_of(stage: str) -> StageProgress:
            if stage not in shown:
                for other in shown.values():
                    other.close()
                shown[stage] = StageProgress(stage, counts[stage], log=self.log, bars=self.opts.bars)
            return shown[stage]

        runner = self.runner = self._make_runner(progress_of, self._jobs(specs))
        events = runner.run(specs, forced=self.forced)
        not_run = "interrupted"  # what the tasks never reached are, unless the loop says otherwise
        try:
            for event in events:
                if event.kind == "started":
                    continue
                spec = by_id[event.task]
                o = outcomes[spec.id] = self._outcome(spec, event)
                if self._sections is not None:
                    self._sections.submit(o)
                progress_of(spec.stage).finished(spec.asset, o.status, o.seconds, o.error or o.reason,
                                                 overall=overall.finished())
                if o.status == "failed" and self.opts.fail_fast:
                    not_run = "not run: --fail-fast after a failure"
                    break
        finally:
            events.close()  # a runner elsewhere cancels its in-flight work here
            for p in shown.values():
                p.close()
            report.tasks = [outcomes.get(s.id) or TaskOutcome(s.stage, s.asset, "skipped", reason=not_run,
                                                              out_dir=display_path(Path(s.out_dir)))
                            for s in specs]

    def _jobs(self, specs: list[TaskSpec]) -> int:
        """``--jobs``, with ``auto`` resolved from the tasks this bake builds: a pool only
        where a GPU does the training and two or more tasks build (a cached re-bake starts
        no workers)."""
        if self.opts.jobs != AUTO_JOBS:
            return int(self.opts.jobs)
        from bakery.pipeline.pool_runner import auto_jobs

        to_build = [s for s in specs if not s.error
                    and (self.forced(s) or not s.key or not self.cache.bundle_dir(s.key).is_dir())]
        return 1 if self.runner_kind == "ray" else auto_jobs(s.device_class for s in to_build)

    def _make_runner(self, progress_of, jobs: int):
        """The local runner, a process pool (``--jobs``) or a Ray cluster (``--runner ray``)."""
        log_dir = self.pipe.out / "logs"
        o = self.opts
        if self.runner_kind == "ray":
            from bakery.pipeline.dispatch import DagRunner
            from bakery.pipeline.ray_runner import RayBackend

            backend = RayBackend(address=o.address, cache_root=self.cache.root, shared_cache=o.shared_cache,
                                 max_retries=o.max_retries, actors_per_gpu=jobs, device_workers=jobs,
                                 device_cache=self.devices.cache_dir)
            return DagRunner(self.cache, backend, self.log, log_dir, ship_files=not o.shared_cache)
        if jobs > 1:
            from bakery.pipeline.dispatch import DagRunner
            from bakery.pipeline.pool_runner import PoolBackend

            self.log.info("%d tasks at once, in worker processes (--jobs %s)", jobs, o.jobs)
            backend = PoolBackend(jobs, self.cache.root, self.devices.cache_dir, max_retries=o.max_retries)
            return DagRunner(self.cache, backend, self.log, log_dir)
        return LocalRunner(self.cache, self.devices, self.log, log_dir=log_dir,
                           progress=lambda spec: progress_of(spec.stage).task_callback(spec.asset))

    def _outcome(self, spec: TaskSpec, event: Event) -> TaskOutcome:
        out_dir = Path(spec.out_dir)
        o = TaskOutcome(spec.stage, spec.asset, event.kind, reason=event.reason, error=event.error or None,
                        seconds=event.seconds, key=spec.key or None, out_dir=display_path(out_dir),
                        log=display_path(event.log) if event.log else None, stage_type=spec.stage_type,
                        **_settings_of(spec))
        if event.kind not in ("built", "cached"):
            return o
        built_in = None if event.kind == "built" else self._build_seconds(spec)
        start = time.monotonic()
        try:
            if not output_matches(out_dir, event.sums or {}):
                if event.kind == "cached":
                    o.reason = "output folder restored from cache"
                self._materialize(self.cache.bundle_dir(spec.key), out_dir)
            if event.kind == "built":  # building and publishing: what a cached re-bake will show
                built_in = round(event.seconds + time.monotonic() - start, 3)
            self.cache.write_record(spec.stage, spec.asset, spec.key, spec.parts, build_seconds=built_in)
        except OSError as e:  # disk full, permissions: this task fails, the bake goes on
            o.status, o.error = "failed", f"{spec.id}: cannot write output: {e}"
            o.seconds += time.monotonic() - start
            return o
        # a cached task shows the time its bundle took to build; checking it costs ~nothing
        o.seconds = built_in if built_in is not None else o.seconds + time.monotonic() - start
        manifest = _read_manifest(self.cache.bundle_dir(spec.key))
        o.metrics = dict(manifest.get("metrics") or {})
        o.verdict = self._verdict(spec.stage_type, manifest)
        decl = self.pipe.stages.get(spec.stage)
        gate = first_failure(decl.require, o.metrics) if decl is not None else None
        if gate:
            o.status, o.error = "failed", f"{spec.id}: {gate}"
        o.outputs = [{"path": display_path(out_dir / rel), "bytes": size, "sha256": digest}
                     for rel, (size, digest) in sorted((event.sums or {}).items())]
        return o

    def _materialize(self, bundle: Path, out_dir: Path) -> None:
        """Copies a sealed entry into the output folder with an atomic replace."""
        from bakery.formats.bundle import atomic_publish
        from bakery.safe_files import refuse_links

        refuse_links(self.pipe.out, out_dir)  # a link planted at out/<stage>: never published through
        staging = staging_dir_for(out_dir)
        try:
            shutil.copytree(bundle, staging, dirs_exist_ok=True)
            atomic_publish(staging, out_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _pipeline_hint(value: str) -> str:
    """``bakery bake --force pipeline.toml`` reads the file as the stage to force."""
    if value.endswith(".toml") or Path(value).is_file():
        return (f"; --force takes a stage name (or '*' for every stage): to force every stage of {value}, "
                f"run `bakery bake {value} --force '*'`")
    return ""


def _read_manifest(bundle: Path) -> dict:
    import json

    from bakery.safe_files import MAX_METADATA_BYTES, read_regular

    try:
        manifest = json.loads(read_regular(bundle / "manifest.json", limit=MAX_METADATA_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def runs_a_subset(opts: BakeOptions) -> bool:
    """Whether this bake runs only some of the pipeline's tasks."""
    return bool(opts.only or opts.assets) or opts.changed is not None


def bake(pipe: Pipeline, opts: BakeOptions, log: logging.Logger | None = None) -> BakeReport:
    """Plans and runs a bake; see :class:`BakeOptions`."""
    return Executor(pipe, opts, log or logging.getLogger("bakery.bake")).run()


def _settings_of(spec: TaskSpec) -> dict:
    """A task's resolved parameters for its report row (none when planning it failed)."""
    if not spec.settings:
        return {}
    settings = Settings.from_dict(spec.settings)
    return {"params": dict(settings.values), "auto": settings.auto}
