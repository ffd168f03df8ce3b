"""Keeping the GPU's clock up before a timed loop.

On the H200 the SM clock falls from 1980 MHz to 345-435 MHz within ~0.3 s of the GPU
idling (a compile, a readback, a new process) and comes back only after ~0.3-0.5 s of
busy time, sometimes later (nvidia-smi every 10 ms; bench/RESULTS.md, "Measuring on the H200"):
a loop timed right after idling runs partly at a quarter of the clock. Benchmarks call
``keep_busy`` with work that leaves the timed job's state alone, just before timing.
"""

from __future__ import annotations

import time
from typing import Callable

#: Busy time before a timed loop: longer than the clock's observed ramp-up.
BUSY_SECONDS = 1.0


def keep_busy(work: Callable[[], object], seconds: float = BUSY_SECONDS) -> int:
    """Calls ``work`` (GPU work, waited for) until ``seconds`` have passed, at least once;
    returns the number of calls."""
    end = time.perf_counter() + seconds
    calls = 0
    while calls == 0 or time.perf_counter() < end:
        work()
        calls += 1
    return calls


def decode_on_gpu(trainer, objective) -> Callable[[], None]:
    """Work for ``keep_busy``: a texel objective's decode kernel over its texels, waited for
    but not read back (a read-back leaves the GPU idle while the host copies), leaving the
    training state alone."""
    return lambda: trainer.run_kernel("decode", objective.width * objective.height, objective.uniforms(0, 1, 0))
