"""``bakery bake`` and ``bakery clean`` (wired into bakery/cli.py).

Exit codes: 0 every task built or cached, 1 some task failed, 2 configuration or usage
error (nothing was run), 3 (``--dry-run`` only) something would build — make's ``-q``
convention, so a hook can ask "is everything baked?" — and 130 interrupted.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import click

from bakery.errors import EXIT_OK, EXIT_TASK_FAILED, EXIT_USAGE, BakeryError, UsageError
from bakery.pipeline.config import ConfigError, display_path, load_pipeline, load_project_paths
from bakery.pipeline.executor import ALL_STAGES, BakeOptions, bake
from bakery.pipeline.lock import LOCK_NAME, OutputLock

EXIT_INTERRUPTED = 130
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
@click.option("--device", type=click.Choice(["auto", "vulkan", "cuda", "software"]), default=None,
              help="Override [project] device.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the bake report here (always written to <out>/bake-report.json).")
@click.option("-v", "--verbose", is_flag=True, help="Per-task log lines even on a terminal.")
def bake_cmd(pipeline, force, only, assets, changed, changed_from, dry_run, fail_fast, no_wait, device,
             report, verbose):
    """Bake PIPELINE (default pipeline.toml): every (stage, asset) task, through the cache."""
    log = _setup_logging(verbose)
    try:
        pipe = load_pipeline(pipeline)
        opts = BakeOptions(force=[force] if force else [], only=only, assets=assets,
                           changed=_read_changed(changed, changed_from), dry_run=dry_run,
                           fail_fast=fail_fast, wait=not no_wait, device=device, report=report)
        result = bake(pipe, opts, log)
    except BakeryError as e:
        _fail(e)
    except KeyboardInterrupt:
        click.echo("interrupted: finished outputs are kept; the next bake resumes from the cache", err=True)
        sys.exit(EXIT_INTERRUPTED)
    for note in result.notes:
        log.warning("%s", note)
    click.echo(result.table())
    if dry_run:
        sys.exit(EXIT_WOULD_BUILD if result.totals().get("would-build") else EXIT_OK)
    click.echo(f"report: {display_path(pipe.out / 'bake-report.json')}")
    sys.exit(EXIT_TASK_FAILED if result.failed else EXIT_OK)


@click.command("clean")
@click.argument("pipeline", default="pipeline.toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--keep-cache", is_flag=True, help="Remove only the output folder, keep the cache.")
@click.option("--no-wait", is_flag=True, help="Fail at once if a bake holds the output folder.")
def clean_cmd(pipeline, keep_cache, no_wait):
    """Remove PIPELINE's outputs and its cache (the output folder keeps only its lock file)."""
    log = _setup_logging(False)
    try:
        out, cache = load_project_paths(pipeline)
        with OutputLock(out, wait=not no_wait, say=log.warning):
            for what, path in (("output", out), ("cache", cache)):
                if what == "cache" and keep_cache:
                    continue
                doomed = [p for p in path.iterdir() if p.name != LOCK_NAME] if path.is_dir() else []
                for p in doomed:
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                if what == "cache" and path.is_dir():
                    path.rmdir()
                click.echo(f"removed {what} folder {display_path(path)} ({len(doomed)} entries)")
    except BakeryError as e:
        _fail(e)
    sys.exit(EXIT_OK)


__all__ = ["bake_cmd", "clean_cmd", "EXIT_USAGE"]
