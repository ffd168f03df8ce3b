"""``bakery bake --runner ray``: the same bake on a Ray cluster.

Tasks of stages that use a device run on :class:`DeviceWorker` actors, one per GPU (or
``actors_per_gpu`` sharing one, to overlap a task's CPU tail with another's training):
each opens its slangpy device and Slang compile cache once and keeps them for every task
it gets. Ray hands an actor its GPU through ``CUDA_VISIBLE_DEVICES``; the actor opens the
Vulkan adapter with that GPU's UUID (:mod:`bakery.gpus`). Stages that use no device run
as plain Ray tasks with ``num_gpus=0``. Scheduling follows the DAG
(:class:`~bakery.pipeline.dispatch.DagRunner`): a task is submitted once its upstream
tasks are in the driver's cache, so independent tasks run at once.

Two cache modes. By default a task ships its sources and upstream bundles as bytes and
the bundle comes back as bytes (no shared filesystem needed); the driver seals the entry.
With ``shared_cache`` the workers read sources at their paths and build straight into the
pipeline's cache folder, which must then be the same path on every node.

A worker process that dies is retried (``max_retries``; actors are restarted and reopen
their device); a task that still cannot finish is reported failed, never half-written.
Interrupting the bake cancels the cluster's tasks and kills its actors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from bakery.errors import UsageError
from bakery.pipeline.dispatch import Job
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.worker import Attempt, DevicePool

INSTALL_HINT = "--runner ray needs Ray: pip install 'bakery[ray]' (or pip install 'ray>=2.9')"


def private_cluster_env() -> None:
    """Settings for a cluster this bake starts for itself: it listens on loopback only
    (Ray reads this when imported) and needs no token."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def require_ray(*, private: bool = False):
    """The ray module, or a one-line usage error saying how to install it. ``private``:
    the bake will start its own local cluster (see :func:`private_cluster_env`)."""
    if private and "ray" not in sys.modules:
        private_cluster_env()
    try:
        import ray
    except ImportError:
        raise UsageError(INSTALL_HINT, key="--runner") from None
    return ray


class DeviceWorker:
    """A Ray actor holding one device (on its assigned GPU) for all the tasks it runs."""

    def __init__(self, shared_cache: str | None, device_cache: str | None):
        from bakery.gpus import assigned_gpu_uuid

        self.gpu_uuid = assigned_gpu_uuid()
        self.shared_cache = shared_cache
        cache = Path(device_cache) if device_cache else None
        self.devices = DevicePool(cache, gpu_uuid=self.gpu_uuid)

    def build(self, payload: dict) -> Attempt:
        from bakery.pipeline.dispatch import run_packed

        return run_packed(payload, self.devices, self.shared_cache)

    def where(self) -> dict:
        """Process id and GPU of this actor (tests and the benchmark kill or chart it)."""
        return {"pid": os.getpid(), "gpu_uuid": self.gpu_uuid,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def _cpu_build(payload: dict, shared_cache: str | None, device_cache: str | None) -> Attempt:
    from bakery.pipeline.dispatch import run_packed

    return run_packed(payload, DevicePool(Path(device_cache) if device_cache else None), shared_cache)


class RayBackend:
    """A :class:`~bakery.pipeline.dispatch.Backend` on a Ray cluster.

    ``address`` None starts a local cluster (and stops it at the end); ``auto`` or
    ``ray://HOST:PORT`` joins an existing one. A driver that already called
    ``ray.init`` is used as it is. Ray is started on the first task that builds.
    """

    def __init__(self, *, address: str | None, cache_root: Path, shared_cache: bool, max_retries: int = 2,
                 actors_per_gpu: int = 1, device_workers: int = 1, device_cache: Path | None = None):
        self.address, self.max_retries = address, max_retries
        self.actors_per_gpu, self.device_workers = max(1, actors_per_gpu), max(1, device_workers)
        self.shared_cache = str(cache_root) if shared_cache else None
        # The Slang compile cache: beside the pipeline's when every node sees it,
        # else in each node's own user cache folder.
        self.device_cache = str(device_cache) if shared_cache and device_cache else None
        self._ray: Any = None
        self._started_ray = False
        self.actors: list = []
        self._idle: list = []
        self._running: dict[Any, tuple[Job, Any]] = {}  # object ref -> (job, actor or None)

    # -- lifecycle ---------------------------------------------------------------
    def _start(self):
        if self._ray is not None:
            return self._ray
        ray = require_ray(private=self.address is None)
        if not ray.is_initialized():
            if self.address is None:
                private_cluster_env()
            _reachable(self.address)
            handlers = _signal_handlers()
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         logging_level="WARNING")
            except Exception as e:  # noqa: BLE001 - no cluster there, ray[client] missing: one line
                first = (str(e).strip().splitlines() or [""])[0]
                raise UsageError(f"cannot join the Ray cluster at {self.address or 'a local cluster'} "
                                 f"({type(e).__name__}: {first})", key="--address") from None
            finally:
                _restore(handlers)  # Ray's own SIGTERM handler dumps stacks; bakery's ends the bake (143)
            self._started_ray = True
        self._ray = ray
        gpus = int(ray.cluster_resources().get("GPU", 0))
        n = gpus * self.actors_per_gpu if gpus else self.device_workers
        actor = ray.remote(DeviceWorker).options(
            num_gpus=(1.0 / self.actors_per_gpu) if gpus else 0, num_cpus=1,
            max_restarts=self.max_retries, max_task_retries=self.max_retries)
        self.actors = [actor.remote(self.shared_cache, self.device_cache) for _ in range(n)]
        self._idle = list(self.actors)
        self._cpu = ray.remote(_cpu_build).options(num_cpus=1, num_gpus=0, max_retries=self.max_retries)
        return ray

    def can_take(self, spec: TaskSpec) -> bool:
        self._start()
        return bool(self._idle) if spec.device is not None else True

    def submit(self, job: Job) -> None:
        ray = self._start()
        if job.spec.device is not None:
            actor = self._idle.pop(0)
            ref = actor.build.remote(job.payload)
        else:
            actor = None
            ref = self._cpu.remote(ray.put(job.payload), self.shared_cache, self.device_cache)
        self._running[ref] = (job, actor)

    def wait(self) -> list[tuple[Job, Attempt | BaseException]]:
        ray = self._ray
        done, _ = ray.wait(list(self._running), num_returns=1)
        ended = []
        for ref in done:
            job, actor = self._running.pop(ref)
            try:
                result: Attempt | BaseException = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a lost worker, after its retries
                result = e
            if actor is not None:
                self._idle.append(actor)
            ended.append((job, result))
        return ended

    def close(self, *, cancel: bool) -> None:
        ray, self._ray = self._ray, None
        if ray is None:
            return
        try:
            if cancel:
                for ref, (_job, actor) in list(self._running.items()):
                    if actor is None:
                        ray.cancel(ref, force=True)
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
        finally:
            self._running.clear()
            self.actors, self._idle = [], []
            if self._started_ray:
                ray.shutdown()


def _signal_handlers() -> dict:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


def _restore(handlers: dict) -> None:
    import signal

    for s, h in handlers.items():
        if h is not None and signal.getsignal(s) is not h:
            signal.signal(s, h)


def _reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A ``HOST:PORT`` (or ``ray://HOST:PORT``) cluster address answers within seconds, or
    one line says it does not; Ray itself retries a missing head for minutes."""
    import socket

    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"{address!r} is not auto, HOST:PORT or ray://HOST:PORT", key="--address")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise UsageError(f"no Ray cluster answers at {address} ({e.strerror or type(e).__name__})",
                         key="--address") from None
