"""Host work that does not depend on training, run beside it.

A task's BCn baselines and the encoding of images it knows before training (its sources,
level 0 of a mip chain) cost seconds of CPU each; done after training they leave the GPU
idle. :class:`SideWork`, started at the task's beginning, runs them on its own threads
while the task's thread trains; the task takes each result (:meth:`Pending.result`) where
it needs it, and always before writing: files, the task's RNG and the device stay on the
task's thread, and side work is a pure function of its arguments, so a bundle's bytes are
those of a serial run.

The threads are daemons and the queue is dropped when the task ends (done, failed or
interrupted), so a signal that stops a bake never waits for an encode to finish. The
encoders it runs (ispc-texcomp, zlib, numpy) release the GIL.

Side work runs at a lower CPU priority (:func:`yield_cpu`): where several tasks share a
host's cores (``bakery bake --jobs``), the threads that feed the device take a core first
and the encodes fill the gaps, instead of eight tasks' encodes starving eight drivers and
leaving the GPU idle between their command buffers.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable

from bakery import phases

#: Threads per task: the host's cores beside the task's thread, at most four (the work a
#: task knows before training is a handful of images).
MAX_WORKERS = 4
#: The nice value side work runs at (0 is the task's own; 10 weighs a tenth as much in
#: Linux's scheduler). Threads an encoder starts from a side thread inherit it.
SIDE_NICENESS = 10


def yield_cpu(niceness: int = SIDE_NICENESS) -> None:
    """Lowers the calling thread's CPU priority (Linux schedules threads one by one; a
    thread can always lower its own). A no-op where the platform has no per-thread nice
    or the thread already runs lower."""
    set_priority = getattr(os, "setpriority", None)
    if set_priority is None or not hasattr(threading, "get_native_id"):
        return
    tid = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
            set_priority(os.PRIO_PROCESS, tid, niceness)
    except OSError:
        pass


def default_workers() -> int:
    return max(1, min(MAX_WORKERS, (os.cpu_count() or 2) - 1))


class Pending:
    """A result being computed beside the task; :meth:`result` waits for it (the wait
    counted as the task's ``waiting`` phase) and raises what the work raised."""

    def __init__(self, future: Future):
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> Any:
        if not self.future.done():
            with phases.time("waiting"):
                return self.future.result()
        return self.future.result()


class SideWork:
    """A task's threads for work beside training: ``with SideWork() as side:``, then
    ``side.submit("baselines", fn, *args)`` -> :class:`Pending`. Work runs in submission
    order, each item under its phase and in the submitter's context (its phase clock).
    ``workers=0`` runs each item at once on the submitting thread: the serial bake the
    overlapped one must equal byte for byte."""

    def __init__(self, workers: int | None = None):
        self.workers = default_workers() if workers is None else workers
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, phase: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Pending:
        if self._closed:
            raise RuntimeError("side work already closed")
        future: Future = Future()
        if self.workers == 0:
            future.set_running_or_notify_cancel()
            try:
                future.set_result(_timed(phase, fn, args, kwargs))
            except Exception as e:  # noqa: BLE001 - raised where the result is taken, as with threads
                future.set_exception(e)
            return Pending(future)
        context = contextvars.copy_context()
        self._queue.put((future, context, phase, fn, args, kwargs))
        if len(self._threads) < self.workers:
            t = threading.Thread(target=self._work, name=f"bakery-side-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()
        return Pending(future)

    def _work(self) -> None:
        yield_cpu()
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, context, phase, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = context.run(_timed, phase, fn, args, kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to whoever takes the result
                future.set_exception(e)
            else:
                future.set_result(result)

    def close(self) -> None:
        """Cancels what has not started and lets the threads end; never waits for them."""
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)

    def __enter__(self) -> "SideWork":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _timed(phase: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    with phases.time(phase):
        return fn(*args, **kwargs)
