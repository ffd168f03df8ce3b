"""The worker side of a bake: one :class:`TaskSpec` in, one sealed cache entry out.

Everything a stage sees is rebuilt here from the spec alone (its class by type name,
its inputs from paths and cache keys, its device from the device kind), so the same
spec builds the same bundle in this process, in a pool process or on a cluster node.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bakery.errors import BakeryError, DeviceError, TaskError
from bakery.pipeline.cache import Cache, sha256_file
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.task import run_task
from bakery.stages.base import StageInput
from bakery.stages.params import Settings


class DevicePool:
    """Opens each device kind once per process, on first use only: pure-CPU bakes never
    touch the GPU stack, and a GPU bake pays the opening cost once."""

    def __init__(self, cache_dir: Path | None = None, gpu_uuid: str | None = None):
        self.cache_dir = cache_dir
        self.gpu_uuid = gpu_uuid  # pin hardware devices to this GPU (a cluster worker's)
        self.opened: dict[str, Any] = {}

    def provider(self, spec: TaskSpec) -> Callable[[], Any]:
        def open_for_task():
            if spec.device is None:
                raise TaskError("this stage asked for a device but declares uses_device = False", where=spec.id)
            dev = self.opened.get(spec.device)
            if dev is None:
                from bakery.device import open_device

                pin = {"gpu_uuid": self.gpu_uuid} if self.gpu_uuid else {}
                dev = self.opened[spec.device] = open_device(spec.device, cache_dir=self.cache_dir, **pin)
            if getattr(dev, "wedged", False):
                from bakery.device import DispatchTimeout

                raise DispatchTimeout("the device is still running a dispatch that exceeded its time limit; "
                                      "re-run the bake", where=spec.id)
            dev.dispatch_timeout = spec.dispatch_timeout
            if spec.device_class and dev.device_class != spec.device_class:
                # The key was computed for another device: building would cache a lie.
                raise DeviceError(f"opened {dev.device_class!r} but the bake was planned for "
                                  f"{spec.device_class!r}", key="--device")
            if spec.toolchain and dev.toolchain.to_dict() != spec.toolchain:
                from bakery.pipeline.cache import toolchain_change

                raise DeviceError(f"the device's toolchain is not the one the bake was planned for "
                                  f"({toolchain_change(spec.toolchain, dev.toolchain.to_dict())})", key="--device")
            return dev
        return open_for_task

    def kernel_cache(self) -> dict[str, int]:
        """The opened devices' kernel-cache counters (bakery.device.KernelCacheStats), summed."""
        total: dict[str, int] = {}
        for dev in self.opened.values():
            stats = getattr(dev, "kernel_cache", None)  # a stand-in device may keep none
            for k, v in (stats.to_dict() if stats is not None else {}).items():
                total[k] = total.get(k, 0) + v
        return total

    def info(self) -> dict | None:
        """The first opened device, for the bake report."""
        return next((d.info.to_dict() for d in self.opened.values()), None)


def import_plugins(spec: TaskSpec) -> None:
    """Imports the studio stage modules a spec's pipeline declared (a worker process
    starts with only the built-in stages)."""
    if spec.plugins and spec.plugin_root and spec.plugin_root not in sys.path:
        sys.path.insert(0, spec.plugin_root)
    for mod in spec.plugins:
        try:
            importlib.import_module(mod)
        except SystemExit as e:  # a worker must report it, not vanish as if it had crashed
            raise TaskError(f"plugin {mod!r} exited while being imported (exit code {e.code!r})", where=spec.id) from None


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
          progress: Callable[..., Any] | None = None, replace: bool = False) -> dict:
    """Builds ``spec`` into its cache entry; returns the entry's checksums. ``replace``
    (a forced rebuild) replaces an existing entry instead of keeping it.

    Raises :class:`TaskError`/:class:`UsageError` (one line) when the stage fails, and
    :class:`DeviceError` when no device can be had (that ends the whole bake).
    """
    before = devices.kernel_cache()
    try:
        return cache.put(spec.key, build_into(spec, cache, devices, log=log, progress=progress), replace=replace)
    finally:
        after = devices.kernel_cache()
        if after:  # the task log says whether this task compiled or reused its kernels
            new = {k: v - before.get(k, 0) for k, v in after.items()}
            log.debug("kernels: %d Slang module(s) compiled, %d kernel(s) linked, %d reused from this process",
                      new["modules"], new["kernels"], new["hits"])


def build_into(spec: TaskSpec, cache: Cache, devices: DevicePool, *, log: logging.Logger,
               progress: Callable[..., Any] | None = None) -> Callable[[Path], dict]:
    """``spec``'s stage, its inputs read (sources checked against their hashes, upstream
    bundles from ``cache``), as a function that bakes the bundle into a folder and returns
    its manifest: what a cache entry is filled with, and what --verify-determinism bakes
    again (bakery.pipeline.determinism)."""
    from bakery.formats.errors import BundleError
    from bakery.stages import get_stage

    import_plugins(spec)
    stage_cls = get_stage(spec.stage_type, where=spec.id)
    try:
        inputs = stage_inputs(spec, cache)
    except (OSError, BundleError) as e:
        raise TaskError(f"cannot read input: {e}", where=spec.id) from None
    return lambda folder: run_task(
        stage_cls, inputs, Settings.from_dict(spec.settings), seed=spec.seed, device_provider=devices.provider(spec),
        out_dir=folder, log=log, progress=progress, where=spec.id)


@dataclass
class Attempt:
    """What a worker in another process or on another node sends back for one task."""

    task: str
    status: str                           # built | failed | device-error
    sums: dict | None = None              # the entry's checksums (built)
    error: str = ""                       # one line (failed, device-error)
    log: str = ""                         # the task's log, for <out>/logs
    seconds: float = 0.0
    files: dict[str, bytes] | None = None  # the bundle, when the driver seals the entry
    device: dict | None = None            # the device it ran on, for the bake report


def build_captured(spec: TaskSpec, cache: Cache, devices: DevicePool, *, replace: bool = False,
                   return_files: bool = False) -> Attempt:
    """:func:`build` for a worker elsewhere: its log is captured as text and every
    outcome is a value (a task's failure must not look like a lost worker to a scheduler
    that retries those). With ``return_files`` the bundle's bytes come back too."""
    import io
    import time

    text = io.StringIO()
    log = logging.getLogger(f"bakery.worker.{spec.stage}.{spec.asset.replace('/', '.')}")
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    start = time.monotonic()
    attempt = Attempt(spec.id, "failed")
    try:
        attempt.sums = build(spec, cache, devices, log=log, replace=replace)
        attempt.status = "built"
        if return_files:
            attempt.files = read_tree(cache.bundle_dir(spec.key))
    except DeviceError as e:
        attempt.status, attempt.error = "device-error", e.one_line()
    except BakeryError as e:
        attempt.error = e.one_line()
    except OSError as e:  # sealing the cache entry: disk full, permissions
        attempt.error = f"{spec.id}: cannot write cache entry: {e}"
    finally:
        if attempt.error:
            log.error("%s", attempt.error)
        log.removeHandler(handler)
        attempt.seconds = time.monotonic() - start
        attempt.log = text.getvalue()
        attempt.device = devices.info()
    return attempt


def read_tree(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file below ``root`` (a bundle on the wire)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_tree(files: dict[str, bytes], folder: Path) -> None:
    """Publishes ``files`` (from :func:`read_tree`) as ``folder``, atomically."""
    from bakery.formats.publish import atomic_publish, make_staging_dir

    folder = Path(folder)
    staging = make_staging_dir(folder)
    try:
        for rel, data in files.items():
            p = (staging / rel).resolve()
            if not p.is_relative_to(staging.resolve()) or Path(rel).is_absolute():
                raise OSError(f"refusing bundle path {rel!r} outside the bundle")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        atomic_publish(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
