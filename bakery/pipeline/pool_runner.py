"""``bakery bake --jobs N``: tasks in N worker processes on this machine.

Each process opens its own device (once, on its first GPU task) on the same GPU, so while
one task spends seconds on the CPU (BCn baselines, PNG/KTX2/zstd encoding, ONNX export)
another task's training keeps the GPU busy, and CPU-only stages run beside both. The
workers build straight into the pipeline's cache, whose entries are sealed by a rename
that at most one writer wins.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from pathlib import Path
from typing import Iterable

from bakery.pipeline.dispatch import Job
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.worker import Attempt, DevicePool

#: ``--jobs auto``'s ceiling: past it the workers' CPU work outgrows one GPU's share of a
#: host's cores, and each worker holds its own device (driver memory, compiled kernels).
MAX_AUTO_JOBS = 8
#: GPU memory ``--jobs auto`` counts per worker: a 4096² six-map set peaks at 10.4 GiB
#: above idle in mipmap and 3.9 GiB in ntc (bench/studio_library.py), and the worker's
#: context and kernels add to it.
GPU_BYTES_PER_WORKER = 12 << 30
#: Workers where the GPU's memory cannot be read.
UNKNOWN_MEMORY_JOBS = 2

_devices: DevicePool | None = None  # one per worker process, opened lazily
_cache_root: str | None = None


def auto_jobs(device_classes: Iterable[str | None], cpus: int | None = None, gpu_bytes: int | None = None) -> int:
    """How many tasks ``--jobs auto`` runs at once, given the device classes (as the planner
    probed them) of the tasks to build. On a GPU a task leaves it idle for most of its wall
    time (decodes for metrics, BCn baselines, image encoding: bench/library.py), so one
    worker per two cores keeps it fed, as many as its memory holds (``gpu_bytes``, read from
    the driver where not given); on a software device (lavapipe) one task already spreads
    over every core, and a second only splits them (bench/runners.py), so one."""
    from bakery.stages.params import preset_class

    classes = list(device_classes)
    gpus = [c for c in classes if c is not None and preset_class(c) == "gpu"]
    if not gpus:
        return 1
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
    memory = gpu_bytes if gpu_bytes is not None else gpu_memory(gpus[0])
    by_memory = memory // GPU_BYTES_PER_WORKER if memory else UNKNOWN_MEMORY_JOBS
    return max(1, min(MAX_AUTO_JOBS, cpus // 2, by_memory, len(classes)))


def gpu_memory(device_class: str) -> int | None:
    """The device-local memory of the GPU a device class (``backend:ADAPTER``) names, as its
    Vulkan driver reports it; None where no driver lists it."""
    from bakery import vulkan_probe

    found = vulkan_probe.find(name=device_class.partition(":")[2])
    return found.memory_bytes if found is not None else None


def _init_worker(cache_root: str, device_cache: str) -> None:
    global _devices, _cache_root
    _devices, _cache_root = DevicePool(Path(device_cache)), cache_root


def _run(payload: dict) -> Attempt:
    from bakery.pipeline.dispatch import run_packed

    assert _devices is not None
    return run_packed(payload, _devices, _cache_root)


class PoolBackend:
    """A :class:`~bakery.pipeline.dispatch.Backend` of ``jobs`` processes. A process
    that dies (a crashing driver, the OOM killer) breaks the pool: it is restarted and
    the tasks it held run again, up to ``max_retries`` times each."""

    def __init__(self, jobs: int, cache_root: Path, device_cache: Path, max_retries: int = 2):
        self.jobs, self.max_retries = jobs, max_retries
        self._args = (str(cache_root), str(device_cache))
        self._pool: cf.ProcessPoolExecutor | None = None
        self._running: dict[cf.Future, Job] = {}
        self._tries: dict[str, int] = {}

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            # spawn: the driver has a Vulkan instance open (planning lists adapters), and
            # forking a process that holds one is undefined.
            self._pool = cf.ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_init_worker, initargs=self._args)
        return self._pool

    def can_take(self, spec: TaskSpec) -> bool:
        return len(self._running) < self.jobs

    def submit(self, job: Job) -> None:
        self._tries[job.spec.id] = self._tries.get(job.spec.id, 0) + 1
        try:
            fut = self._executor().submit(_run, job.payload)
        except cf.process.BrokenProcessPool:  # a worker died since the last wait
            self._restart()
            fut = self._executor().submit(_run, job.payload)
        self._running[fut] = job

    def wait(self) -> list[tuple[Job, Attempt | BaseException]]:
        done, _ = cf.wait(list(self._running), return_when=cf.FIRST_COMPLETED)
        ended, lost = [], []
        for fut in done:
            job = self._running.pop(fut)
            try:
                result: Attempt | BaseException = fut.result()
            except (cf.process.BrokenProcessPool, cf.CancelledError) as e:  # its pool broke
                if self._tries[job.spec.id] <= self.max_retries:
                    lost.append(job)
                    continue
                result = e
            except Exception as e:  # noqa: BLE001 - reported as the task's failure
                result = e
            ended.append((job, result))
        if lost:
            self._restart()
            for job in lost:
                self.submit(job)
        return ended

    def _restart(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self, *, cancel: bool) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if cancel:
            kill = getattr(pool, "terminate_workers", None)  # Python 3.14
            if kill is not None:
                kill()
            else:
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
