"""One task = one stage run over one input, written atomically into one folder.

Both ``bakery run`` (the one-off CLI form of a stage) and the pipeline executor call
:func:`run_task`, so a stage behaves identically in both: it receives settings checked
and resolved before any work (by the loader and the planner in a bake, by
:func:`settings_for` in a one-off run), outputs go to a hidden staging folder on the same
filesystem and are renamed into place only after the manifest is complete. A crash,
Ctrl-C or SIGKILL therefore never leaves a half-written output folder behind.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bakery import phases
from bakery.errors import BakeryError, TaskError, UsageError
from bakery.stages.base import Stage, StageContext, StageInput, StageResult
from bakery.stages.params import Settings, preset_class


def _no_progress(*args: Any, **kwargs: Any) -> None:
    """Progress sink used when the caller shows none."""


class _TrackingDeviceProvider:
    """Wraps the caller's provider to learn whether this task actually opened the device
    (the manifest records the device only then), and checks it is of the class the
    settings' ``auto`` values were resolved for."""

    def __init__(self, provider: Callable[[], Any] | None, settings: Settings, automatic: bool):
        self._provider = provider
        self._settings, self._automatic = settings, automatic
        self.device = None

    def __call__(self):
        if self._provider is None:
            raise TaskError("this stage asked for a device but none was provided")
        self.device = self._provider()
        opened = preset_class(self.device.device_class) if self._automatic else None
        if opened is not None and opened != self._settings.device_class:
            raise TaskError(f"opened a {opened} device but the parameters were resolved for a "
                            f"{self._settings.device_class} one")
        return self.device


def settings_for(stage_cls: type[Stage], raw_params: Mapping[str, Any], inputs: Sequence[StageInput], *,
                 device_class: str | None, where: str | None = None, key_prefix: str = "params") -> Settings:
    """A stage's settings outside a pipeline (``bakery run``, benchmarks, tests): the
    loader's validation and the planner's resolution, in one call. ``device_class`` is
    the class of the device the run will open (:func:`bakery.device.probe_device_class`,
    or ``Device.device_class``)."""
    params = stage_cls.validate(raw_params or {}, where=where, key_prefix=key_prefix)
    files = {r: Path(p) for i in inputs for r, p in i.files.items()}
    return stage_cls.settings(params, device_class=device_class if stage_cls.uses_device else None, files=files)


def staging_dir_for(out_dir: Path) -> Path:
    """A fresh hidden folder beside ``out_dir``: same filesystem, so publishing is a rename."""
    from bakery.formats.publish import make_staging_dir

    return make_staging_dir(out_dir)


def run_task(stage_cls: type[Stage], inputs: Sequence[StageInput], settings: Settings, *, seed: int,
             device_provider: Callable[[], Any] | None, out_dir: Path, log: logging.Logger,
             progress: Callable[..., Any] | None = None, where: str | None = None) -> dict:
    """:func:`publish_task`, its seconds per phase (bakery.phases) recorded and, once the
    bundle is published, logged: a per-run fact for the task log, never the bundle."""
    with phases.recording() as clock:
        manifest = publish_task(stage_cls, inputs, settings, seed=seed, device_provider=device_provider,
                                out_dir=out_dir, log=log, progress=progress, where=where)
        log.debug("%s", phases.log_line(clock))
    return manifest


def publish_task(stage_cls: type[Stage], inputs: Sequence[StageInput], settings: Settings, *, seed: int,
                 device_provider: Callable[[], Any] | None, out_dir: Path, log: logging.Logger,
                 progress: Callable[..., Any] | None = None, where: str | None = None) -> dict:
    """Runs ``stage_cls`` over ``inputs`` with ``settings`` (checked and resolved already:
    :meth:`Stage.settings`) and publishes its bundle at ``out_dir``.

    Raises :class:`~bakery.errors.UsageError` for a bad output folder or input and
    :class:`~bakery.errors.TaskError` (one line) when the stage fails; in both cases
    ``out_dir`` is left exactly as it was. Returns the bundle manifest.
    """
    if not isinstance(settings, Settings):
        raise TypeError("run_task takes Settings (Stage.settings or settings_for), not raw parameters")
    from bakery.formats.bundle import BundleWriter, atomic_publish, symbol_prefix

    out_dir = Path(out_dir).absolute()
    if out_dir.is_symlink():
        raise UsageError("is a symbolic link; bakery never publishes through a link it did not make",
                         where=str(out_dir), key="out")
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError("exists and is not a folder; bundles are folders", where=str(out_dir), key="out")
    if not out_dir.name or out_dir == out_dir.parent:
        raise UsageError("not a usable bundle folder", where=str(out_dir), key="out")
    from bakery.formats.publish import stale_staging

    for stale in stale_staging(out_dir.parent, out_dir.name):  # a killed earlier run's
        shutil.rmtree(stale, ignore_errors=True)
    staging = staging_dir_for(out_dir)
    automatic = stage_cls.presets is not None
    tracker = _TrackingDeviceProvider(device_provider, settings, automatic)
    try:
        writer = BundleWriter(staging, symbol_prefix=symbol_prefix(stage_cls.type_name, inputs[0].name if inputs else "",
                                                                 dict(settings.given)))
        ctx = StageContext(device_provider=tracker, seed=seed, out=writer,
                           progress=progress or _no_progress, log=log)
        result = stage_cls().run(ctx, list(inputs), settings)
        if result is None:
            result = StageResult()
        device_info = tracker.device.info.to_dict() if tracker.device is not None else None
        toolchain = tracker.device.toolchain.to_dict() if tracker.device is not None else None
        manifest = writer.finalize({
            "stage": {"type": stage_cls.type_name, "version": stage_cls.version},
            "params": dict(settings.given),
            "seed": int(seed),
            "device": device_info,
            "toolchain": toolchain,
            "metrics": result.all_metrics(),
            **({"resolved_params": settings.record()} if automatic else {}),
            **result.manifest,
            **({"verdict": result.verdict.to_dict()} if result.verdict is not None else {}),
        })
        atomic_publish(staging, out_dir)
    except BakeryError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except Exception as e:  # noqa: BLE001 - any stage bug becomes a one-line task failure
        shutil.rmtree(staging, ignore_errors=True)
        raise TaskError(f"{type(e).__name__}: {e}", where=where) from e
    except BaseException:  # KeyboardInterrupt, SystemExit: clean up, keep their meaning
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest
