"""The ``bakery`` command line: devices, one-off stage runs, pipeline bakes, bundles.

Every expected failure ends with one line on stderr and the exit codes of
:mod:`bakery.errors` (0 ok, 1 a task failed, 2 usage or configuration error).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from bakery import __version__
from bakery.device import DEVICE_KINDS
from bakery.errors import BakeryError


class _Group(click.Group):
    """Turns a BakeryError raised anywhere into its one-line message and exit code."""

    def main(self, *args, **kwargs):
        try:
            return super().main(*args, **kwargs)
        except SystemExit as e:
            from bakery.device import exit_now

            exit_now(e.code if isinstance(e.code, int) else 1)  # a device still busy: do not wait for it
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BakeryError as e:
            click.echo(f"bakery: error: {e.one_line()}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt as e:  # bakery run, decompress: Ctrl-C or SIGTERM, no traceback
            from bakery.pipeline.safety import exit_code_of

            click.echo("interrupted: nothing was published", err=True)
            sys.exit(exit_code_of(e))
        except OSError as e:  # read-only or full disk outside a task: one line, not a traceback
            from bakery.pipeline.safety import filesystem_error

            click.echo(f"bakery: error: {filesystem_error(e).one_line()}", err=True)
            sys.exit(filesystem_error(e).exit_code)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="bakery")
def main():
    """bakery: neural asset baking for game engines."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def devices(as_json):
    """List the GPU/Vulkan devices bakery can use."""
    from bakery.device import INSTALL_HINT, list_devices
    from bakery.errors import DeviceError

    found = list_devices()
    if not found:
        raise DeviceError(INSTALL_HINT)
    if as_json:
        click.echo(json.dumps([d.to_dict() for d in found]))
    else:
        click.echo(f"{'backend':8} {'cooperative_vector':18} {'software':8} adapter")
        for d in found:
            click.echo(f"{d.backend:8} {str(d.cooperative_vector):18} {str(d.software):8} {d.adapter}")


def _parse_params(items) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            from bakery.errors import UsageError

            raise UsageError(f"expected KEY=VALUE, got {item!r}", key="--param")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


class _RunCommand(click.Command):
    """``bakery run STAGE --help`` also lists STAGE's parameters (types, ranges, defaults)."""

    def parse_args(self, ctx, args):
        self._args = list(args)  # --help is eager: remember which stage it was asked for
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx, formatter):
        super().format_epilog(ctx, formatter)
        from bakery.stages import get_stage, known_stages

        names = [a for a in getattr(self, "_args", []) if a in known_stages()]
        if not names:
            formatter.write_paragraph()
            formatter.write_text(f"Stages: {', '.join(known_stages())}. 'bakery run STAGE --help' lists its parameters.")
            return
        cls = get_stage(names[0])
        with formatter.section(f"Parameters of {cls.type_name} (--param KEY=VALUE)"):
            formatter.write_dl([(p.name, f"{p.doc}; {p.describe()}".lstrip("; ")) for p in cls.params])


@main.command(cls=_RunCommand)
@click.argument("stage")
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path), help="output bundle folder")
@click.option("--param", "param_items", multiple=True, metavar="KEY=VALUE", help="stage parameter (repeatable)")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--device", "device_kind", default="auto", show_default=True,
              type=click.Choice(DEVICE_KINDS))
@click.option("--dispatch-timeout", type=click.FloatRange(0, 1e6, min_open=True), default=600.0, show_default=True,
              metavar="SECONDS", help="Fail when one device dispatch runs longer (a shader that never terminates).")
def run(stage, inputs, out_dir, param_items, seed, device_kind, dispatch_timeout):
    """Run one stage once: bakery run STAGE INPUT... -o OUT [--param k=v]."""
    from bakery.device import open_device, probe_device_class
    from bakery.errors import UsageError
    from bakery.pipeline.config import role_files
    from bakery.pipeline.safety import check_bundle_target, sigterm_as_interrupt
    from bakery.pipeline.task import run_task
    from bakery.progress import format_info, progress
    from bakery.stages import StageInput, get_stage

    stage_cls = get_stage(stage, key="STAGE")
    params = stage_cls.validate(_parse_params(param_items), key_prefix="--param")
    roles = stage_cls.input_roles
    missing = [p for p in inputs if not Path(p).exists()]
    if missing:
        raise UsageError("not found", where=str(missing[0]), key="INPUTS")
    if len(inputs) == 1 and Path(inputs[0]).is_dir() and len(roles) > 1:
        files = role_files(Path(inputs[0]), roles)
    elif len(inputs) == len(roles):
        files = dict(zip(roles, map(Path, inputs)))
    else:
        raise UsageError(f"{stage} takes {len(roles)} input(s): {', '.join(roles)}", key="INPUTS")
    if not files:
        raise UsageError(f"holds no file named by a role ({', '.join(roles)})", where=inputs[0], key="INPUTS")
    for role, path in files.items():
        if not Path(path).exists():
            raise UsageError("file not found", where=str(path), key=role)
    check_bundle_target(out_dir)
    name = Path(inputs[0]).stem
    source = [StageInput(name=name, files=files)]
    # ``auto`` resolves for the device the run will open, as a bake's planner does
    settings = stage_cls.settings(params, files=files,
                                  device_class=probe_device_class(device_kind) if stage_cls.uses_device else None)
    bar, shown = None, 0

    def report(done=None, total=None, **info):
        # A stage may train several times (ntc's target_psnr search): a count that starts
        # again begins a new bar rather than running the old one backwards.
        nonlocal bar, shown
        if done is None:
            return
        if bar is None or done < shown:
            if bar is not None:
                bar.close()
            bar, shown = progress(total or done, f"{stage} {name}"), 0
        if info:  # live quality, step rate and time left (TrainingProgress), a fit's loss
            bar.set_postfix_str(format_info(info), refresh=False)
        bar.update(done - shown)
        shown = done

    log = logging.getLogger("bakery.run")
    with sigterm_as_interrupt():  # CI cancels with SIGTERM: clean up like Ctrl-C
        manifest = run_task(stage_cls, source, settings, seed=seed,
                            device_provider=lambda: _timed(open_device(device_kind), dispatch_timeout), out_dir=out_dir,
                            log=log, progress=report, where=stage)
    if bar is not None:
        bar.close()
    from bakery.pipeline.report import flatten_metrics

    click.echo(f"{stage}: wrote {out_dir}")
    metrics = flatten_metrics(manifest.get("metrics", {}))
    width = max((len(k) for k in metrics), default=0)
    for k, v in metrics.items():  # one aligned row per metric
        click.echo(f"  {k:<{width}}  {v:.4g}" if isinstance(v, float) else f"  {k:<{width}}  {v}")


def _timed(device, seconds: float):
    device.dispatch_timeout = seconds
    return device


@main.command("init")
@click.argument("folder", default=".", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace an existing pipeline.toml.")
def init_cmd(folder, force):
    """Write FOLDER/pipeline.toml for the textures and material folders found below FOLDER."""
    from bakery.scaffold import init

    target, found = init(folder, folder / "pipeline.toml", force=force)
    n_mat = sum(len(v) for v in found.materials.values())
    n_tex = sum(len(v) for v in found.textures.values())
    click.echo(f"wrote {target}: {n_mat} material(s), {n_tex} single texture(s). Next: bakery bake"
               + ("" if folder == Path(".") else f" {target}") + ", then bakery view out")


@main.command("inspect-inputs")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--normal-convention", type=click.Choice(["gl", "dx"]), default=None,
              help="how the normal maps are stored (default: from their names, else OpenGL)")
def inspect_inputs(folder, normal_convention):
    """Show which file and channel each role of a material FOLDER (or of each material
    folder inside it) is read from, as `material = "..."` would read it."""
    from bakery.naming import describe_folder, detect_roles, suffix_of

    folder = folder.resolve()
    own = [p for p in folder.iterdir() if p.is_file() and suffix_of(p)]
    subs = sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    for d in ([folder] if own or not subs else subs):
        found = detect_roles(d, normal_convention=normal_convention)
        click.echo(f"{d.name}:")
        for line in describe_folder(d, found):
            click.echo(line)


def _register_subsystem_commands() -> None:
    from bakery.formats.cli import inspect_cmd, verify_cmd
    from bakery.pipeline.cli import bake_cmd, clean_cmd
    from bakery.stages.ntc.cli import decompress_cmd
    from bakery.view.cli import view_cmd

    for cmd in (bake_cmd, clean_cmd, inspect_cmd, verify_cmd, decompress_cmd, view_cmd):
        main.add_command(cmd)


_register_subsystem_commands()
