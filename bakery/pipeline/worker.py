"""The worker side of a bake: one :class:`TaskSpec` in, one sealed cache entry out.

Everything a stage sees is rebuilt here from the spec alone (its class by type name,
its inputs from paths and cache keys, its device from the device kind), so the same
spec builds the same bundle in this process, in a pool process or on a cluster node.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Any, Callable

from bakery.errors import DeviceError, TaskError
from bakery.pipeline.cache import Cache, sha256_file
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.task import run_task
from bakery.stages.base import StageInput


class DevicePool:
    """Opens each device kind once per process, on first use only: pure-CPU bakes never
    touch the GPU stack, and a GPU bake pays the opening cost once."""

    def __init__(self, cache_dir: Path | None = None):
        self.cache_dir = cache_dir
        self.opened: dict[str, Any] = {}

    def provider(self, spec: TaskSpec) -> Callable[[], Any]:
        def open_for_task():
            if spec.device is None:
                raise TaskError("this stage asked for a device but declares uses_device = False", where=spec.id)
            dev = self.opened.get(spec.device)
            if dev is None:
                from bakery.device import open_device

                dev = self.opened[spec.device] = open_device(spec.device, cache_dir=self.cache_dir)
            if spec.device_class and dev.device_class != spec.device_class:
                # The key was computed for another device: building would cache a lie.
                raise DeviceError(f"opened {dev.device_class!r} but the bake was planned for "
                                  f"{spec.device_class!r}", key="--device")
            return dev
        return open_for_task

    def info(self) -> dict | None:
        """The first opened device, for the bake report."""
        return next((d.info.to_dict() for d in self.opened.values()), None)


def import_plugins(spec: TaskSpec) -> None:
    """Imports the studio stage modules a spec's pipeline declared (a worker process
    starts with only the built-in stages)."""
    if spec.plugins and spec.plugin_root and spec.plugin_root not in sys.path:
        sys.path.insert(0, spec.plugin_root)
    for mod in spec.plugins:
        importlib.import_module(mod)


def stage_inputs(spec: TaskSpec, cache: Cache) -> list[StageInput]:
    """The stage's view of its inputs: source files (checked against the planned hashes)
    and upstream bundles read and verified through the bundle reader."""
    from bakery.formats.reader import read_bundle

    inputs = []
    for i in spec.inputs:
        if i.upstream is not None:
            inputs.append(StageInput(i.name, bundle=read_bundle(cache.bundle_dir(i.upstream_key or ""))))
            continue
        for role, path in i.files.items():
            if sha256_file(Path(path)) != i.hashes.get(role):
                raise TaskError(f"{path} changed during the bake; bake again", where=spec.id)
        inputs.append(StageInput(i.name, {r: Path(p) for r, p in i.files.items()}))
    return inputs


def build(spec: TaskSpec, cache: Cache, devices: DevicePool, *, log: logging.Logger,
          progress: Callable[..., Any] | None = None) -> dict:
    """Builds ``spec`` into its cache entry; returns the entry's checksums.

    Raises :class:`TaskError`/:class:`UsageError` (one line) when the stage fails, and
    :class:`DeviceError` when no device can be had (that ends the whole bake).
    """
    from bakery.formats.errors import BundleError
    from bakery.stages import get_stage

    import_plugins(spec)
    stage_cls = get_stage(spec.stage_type, where=spec.id)
    try:
        inputs = stage_inputs(spec, cache)
    except (OSError, BundleError) as e:
        raise TaskError(f"cannot read input: {e}", where=spec.id) from None
    return cache.put(spec.key, lambda folder: run_task(
        stage_cls, inputs, spec.params, seed=spec.seed, device_provider=devices.provider(spec),
        out_dir=folder, log=log, progress=progress, where=spec.id))
