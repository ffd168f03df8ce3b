"""``bakery bake --verify-determinism``: every task baked a second time, every byte compared.

Same inputs, seed, toolchain and device model must give the same bytes: a shared cache,
a re-bake that must not churn a game patch, and the Ray runner's agreement with the local
one all rest on it. After the bake, one fresh process (spawned: no state of the first
bake's process carries over, not its device, compiled kernels or Python globals) builds
each task again into a scratch folder, reading its upstream bundles from the cache as the
first bake did, so a difference is pinned to the task that makes it, not to one upstream
of it. The first file whose bytes differ from the cache entry names the task.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from bakery.errors import TaskError
from bakery.formats.bundle import MANIFEST_NAME
from bakery.pipeline.cache import Cache, tree_sums
from bakery.pipeline.spec import TaskSpec


@dataclass
class Difference:
    """The first task whose second bake did not give its first bake's bytes."""

    task: str
    file: str
    detail: str  # "bytes differ", "missing in the second bake", "only in the second bake"

    def one_line(self) -> str:
        return f"{self.task}: not deterministic: {self.file}: {self.detail} (a second bake in a fresh process)"


@dataclass
class DeterminismCheck:
    """What --verify-determinism found: tasks baked twice, and the first difference."""

    tasks: int
    difference: Difference | None = None

    def to_dict(self) -> dict:
        return {"tasks": self.tasks, "difference": asdict(self.difference) if self.difference else None}


def first_difference(first: dict[str, list], second: dict[str, list]) -> tuple[str, str] | None:
    """(file, detail) of the first file whose size or sha256 differs (tree_sums): by name,
    the manifest last (it lists the others' sums, so it differs whenever one of them does)."""
    for name in sorted(set(first) | set(second), key=lambda n: (n == MANIFEST_NAME, n)):
        if name not in second:
            return name, "missing in the second bake"
        if name not in first:
            return name, "only in the second bake"
        if first[name] != second[name]:
            return name, "bytes differ"
    return None


_devices = None  # the verifying process's DevicePool


def _init(device_cache: str) -> None:
    global _devices
    from bakery.pipeline.worker import DevicePool

    _devices = DevicePool(Path(device_cache))


def _bake_again(spec_dict: dict, cache_root: str) -> dict[str, list]:
    """In the verifying process: builds one task into a scratch folder, returns its sums."""
    from bakery.pipeline.worker import build_into

    spec = TaskSpec.from_dict(spec_dict)
    bake = build_into(spec, Cache(Path(cache_root)), _devices, log=logging.getLogger("bakery.verify"))
    scratch = Path(tempfile.mkdtemp(prefix="bakery-verify-"))
    try:
        out = scratch / "bundle"
        bake(out)
        return tree_sums(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def verify_determinism(specs: Sequence[TaskSpec], cache: Cache, device_cache: Path,
                       log: logging.Logger | None = None) -> DeterminismCheck:
    """Bakes each of ``specs`` (built or cached: their entries are sealed) again in one
    fresh process, in order, and stops at the first whose bytes differ."""
    log = log or logging.getLogger("bakery.verify")
    check = DeterminismCheck(tasks=0)
    context = multiprocessing.get_context("spawn")  # as the pool runner: never fork a Vulkan instance
    with cf.ProcessPoolExecutor(1, mp_context=context, initializer=_init, initargs=(str(device_cache),)) as pool:
        for spec in specs:
            try:
                second = pool.submit(_bake_again, spec.to_dict(), str(cache.root)).result()
            except cf.BrokenExecutor:   # a crash in the driver or an OOM kill
                raise TaskError("the second bake's process died (--verify-determinism)", where=spec.id) from None
            check.tasks += 1
            found = first_difference(tree_sums(cache.bundle_dir(spec.key)), second)
            if found is not None:
                check.difference = Difference(spec.id, *found)
                return check
            log.info("verify: %s gives the same bytes again", spec.id)
    return check
