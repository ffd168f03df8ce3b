"""``bakery bake`` and ``bakery clean`` (wired into bakery/cli.py).

Exit codes: 0 every task built or cached, 1 some task failed, 2 configuration or usage
error (nothing was run), 3 (``--dry-run`` only) something would build — make's ``-q``
convention, so a hook can ask "is everything baked?" — and 130 interrupted.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from bakery.device import DEVICE_KINDS

from bakery.errors import EXIT_OK, EXIT_TASK_FAILED, EXIT_USAGE, BakeryError, UsageError
from bakery.pipeline.config import ConfigError, display_path, load_pipeline, load_project_paths
from bakery.pipeline.executor import ALL_STAGES, AUTO_JOBS, BakeOptions, bake
from bakery.pipeline.html_report import HTML_REPORT_NAME
from bakery.pipeline.lock import LOCK_NAME, OutputLock
from bakery.pipeline.safety import (clean_cache, clean_output, exit_code_of, filesystem_error,
                                    sigterm_as_interrupt)

EXIT_INTERRUPTED = 130  # SIGINT; SIGTERM exits 143 (128 + the signal)
EXIT_WOULD_BUILD = 3


def _setup_logging(verbose: bool) -> logging.Logger:
    log = logging.getLogger("bakery")
    if not any(getattr(h, "_bakery_cli", False) for h in log.handlers):
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("bake: %(message)s"))
        h._bakery_cli = True  # type: ignore[attr-defined]
        log.addHandler(h)
        log.propagate = False
    for h in log.handlers:
        if getattr(h, "_bakery_cli", False):
            h.setStream(sys.stderr)  # the current stderr (tests and embedders swap it)
            # tqdm bars replace the per-task lines on a terminal; warnings always show
            h.setLevel(logging.INFO if (verbose or not sys.stderr.isatty()) else logging.WARNING)
    log.setLevel(logging.DEBUG)
    return log


def _fail(e: BakeryError) -> None:
    lines = e.lines if isinstance(e, ConfigError) else [e.one_line()]
    for line in lines:
        click.echo(f"error: {line}", err=True)
    sys.exit(e.exit_code)


def _read_changed(changed: tuple[str, ...], changed_from: str | None) -> list[Path] | None:
    if not changed and changed_from is None:
        return None
    files = [Path(c) for c in changed]
    if changed_from is not None:
        try:
            text = sys.stdin.read() if changed_from == "-" else Path(changed_from).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read the changed-file list ({type(e).__name__})", where=changed_from,
                             key="--changed-from") from None
        files += [Path(line.strip()) for line in text.splitlines() if line.strip()]
    return files


def _force_of(pipeline: Path, force: str | None, log: logging.Logger) -> tuple[Path, str | None]:
    """``bakery bake --force pipeline.toml`` means "force every stage of pipeline.toml"
    (click hands the file to --force, which takes an optional stage name)."""
    if force and force.endswith(".toml") and Path(force).is_file() and pipeline in (Path("pipeline.toml"), Path(force)):
        log.info("--force %s: read as `bakery bake %s --force` (every stage)", force, force)
        return Path(force), ALL_STAGES
    return pipeline, force


class _Jobs(click.ParamType):
    """``--jobs``: a whole number of at least 1, or ``auto``."""
    name = "N|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == AUTO_JOBS:
            return value
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            self.fail(f"{value!r} is not a whole number of at least 1 or {AUTO_JOBS!r}", param, ctx)
        return n


_JOBS = _Jobs()


@click.command("bake")
@click.argument("pipeline", default="pipeline.toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=False, flag_value=ALL_STAGES, default=None, metavar="[STAGE]",
              help="Rebuild even if cached: every task, or only STAGE's (write it after PIPELINE).")
@click.option("--only", multiple=True, metavar="STAGE",
              help="Bake only STAGE's tasks (and the upstream tasks they read). Repeatable.")
@click.option("--asset", "assets", multiple=True, metavar="GLOB",
              help="Bake only assets whose name matches GLOB (e.g. 'photos/*'). Repeatable.")
@click.option("--changed", multiple=True, metavar="FILE",
              help="Bake only the tasks FILE feeds (pre-submit hooks). Repeatable.")
@click.option("--changed-from", metavar="LIST", help="Read --changed files, one per line, from LIST or '-' (stdin).")
@click.option("--dry-run", is_flag=True,
              help="Say what would run and why; touch nothing, open no device. Exit 3 if anything would build.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first failed task (default: keep going).")
@click.option("--no-wait", is_flag=True, help="Fail at once if another bake holds the output folder.")
@click.option("--device", type=click.Choice(DEVICE_KINDS), default=None,
              help="Override [project] device.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the bake report here (always written to <out>/bake-report.json).")
@click.option("--runner", type=click.Choice(["local", "ray"]), default=None,
              help="Where tasks run: this process (default) or a Ray cluster. Overrides [project] runner.")
@click.option("-j", "--jobs", type=_JOBS, default=AUTO_JOBS, show_default=True,
              help="Tasks at once on this machine, in worker processes sharing the GPU (CPU work overlaps "
                   "training); auto: one per two cores up to 8 (and per 12 GiB of GPU memory) where a GPU "
                   "trains and two or more tasks build, else 1. With --runner ray: actors sharing each GPU "
                   "(auto: 1).")
@click.option("--address", default=None, metavar="auto|ray://HOST:PORT",
              help="--runner ray: join this cluster (default: start a local one for the bake).")
@click.option("--shared-cache", is_flag=True,
              help="--runner ray: workers read sources and write the cache folder directly (it must be the "
                   "same path on every node); default: ship files as bytes.")
@click.option("--max-retries", type=click.IntRange(0, 100), default=2, show_default=True,
              help="Times a task whose worker process died runs again (--runner ray, --jobs).")
@click.option("--verify-determinism", is_flag=True,
              help="Then bake every task again in a fresh process and compare every byte; exit 1 naming the "
                   "first task and file that differ.")
@click.option("-v", "--verbose", is_flag=True, help="Per-task log lines even on a terminal.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the bake report (as in bake-report.json) on stdout instead of the table.")
def bake_cmd(pipeline, force, only, assets, changed, changed_from, dry_run, fail_fast, no_wait, device,
             report, runner, jobs, address, shared_cache, max_retries, verify_determinism, verbose, as_json):
    """Bake PIPELINE (default pipeline.toml): every (stage, asset) task, through the cache."""
    log = _setup_logging(verbose)
    try:
        pipeline, force = _force_of(pipeline, force, log)
        pipe = load_pipeline(pipeline)
        opts = BakeOptions(force=[force] if force else [], only=only, assets=assets,
                           changed=_read_changed(changed, changed_from), dry_run=dry_run,
                           fail_fast=fail_fast, wait=not no_wait, device=device, report=report,
                           runner=runner, jobs=jobs, address=address, shared_cache=shared_cache,
                           max_retries=max_retries, verify_determinism=verify_determinism)
        with sigterm_as_interrupt():
            result = bake(pipe, opts, log)
    except BakeryError as e:
        _fail(e)
    except OSError as e:  # read-only or full output folder, unwritable --report: one line
        _fail(filesystem_error(e))
    except KeyboardInterrupt as e:
        click.echo("interrupted: finished outputs are kept; the next bake resumes from the cache", err=True)
        sys.exit(exit_code_of(e))
    for note in result.notes:
        log.warning("%s", note)
    if as_json:
        import json

        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(result.table())
    if dry_run:
        sys.exit(EXIT_WOULD_BUILD if result.totals().get("would-build") else EXIT_OK)
    if not as_json:
        click.echo(f"report: {display_path(pipe.out / 'bake-report.json')}  "
                   f"(pictures: {display_path(pipe.out / HTML_REPORT_NAME)})")
    if result.nondeterministic:
        from bakery.pipeline.determinism import Difference

        click.echo(f"error: {Difference(**result.determinism['difference']).one_line()}", err=True)
    sys.exit(EXIT_TASK_FAILED if result.failed or result.nondeterministic else EXIT_OK)


@click.command("clean")
@click.argument("pipeline", default="pipeline.toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--keep-cache", is_flag=True, help="Remove only the output folder, keep the cache.")
@click.option("--no-wait", is_flag=True, help="Fail at once if a bake holds the output folder.")
def clean_cmd(pipeline, keep_cache, no_wait):
    """Remove what bakes of PIPELINE wrote: its bundles, logs, report and cache (nothing else)."""
    log = _setup_logging(False)
    try:
        out, cache = load_project_paths(pipeline)
        with OutputLock(out, wait=not no_wait, say=log.warning):
            for what, path in (("output", out), ("cache", cache)):
                if what == "cache" and keep_cache:
                    continue
                removed, kept = clean_output(path, keep=(LOCK_NAME,)) if what == "output" else clean_cache(path)
                click.echo(f"removed {what} folder {display_path(path)} ({removed} entries)")
                if kept:
                    log.warning("kept %d file(s) in %s that bakery did not write, e.g. %s", len(kept),
                                display_path(path), display_path(kept[0]))
    except BakeryError as e:
        _fail(e)
    except OSError as e:
        _fail(filesystem_error(e))
    sys.exit(EXIT_OK)


__all__ = ["bake_cmd", "clean_cmd", "EXIT_USAGE"]
