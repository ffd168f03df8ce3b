"""GPU time per phase of a training step (Vulkan timestamps), for benchmarks.

Set an instance as ``Trainer.profiler``: the trainer calls it after each phase it records
("start", "train_step", "reduce" on split-K, "optimizer"), and it writes a timestamp
there. ``phases()`` then gives the mean microseconds each phase took per step: the time
from the previous mark to its own.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from bench.clocks import keep_busy


class StepProfile:
    def __init__(self, device, marks: int):
        import slangpy as spy

        self.pool = device.spy.create_query_pool(type=spy.QueryType.timestamp, count=marks)
        self.capacity, self.labels = marks, []

    def __call__(self, encoder, phase: str) -> None:
        if len(self.labels) < self.capacity:
            encoder.write_timestamp(self.pool, len(self.labels))
            self.labels.append(phase)

    def phases(self) -> dict[str, float]:
        """Mean µs per step of each phase (steps = the number of "start" marks)."""
        t = np.array(self.pool.get_timestamp_results(0, len(self.labels)), np.float64)
        total, steps = defaultdict(float), max(1, self.labels.count("start"))
        for k in range(1, len(self.labels)):
            if self.labels[k] != "start":
                total[self.labels[k]] += t[k] - t[k - 1]
        return {name: round(float(v) / steps * 1e6, 1) for name, v in total.items()}


def profile_steps(device, trainer, steps: int = 20) -> dict[str, float]:
    """Keeps the GPU training for a second (bench/clocks.py: whatever idled it, a PSNR check
    on the host, drops the H200's clock to a quarter, and 20 unprofiled steps did not bring
    it back), then trains ``steps`` more with timestamps, and returns µs per step by phase
    (or {"unavailable": why} on a device without timestamp queries)."""
    try:
        trainer.config = dataclasses.replace(trainer.config, steps=trainer.step + 1_000_000)
        keep_busy(lambda: trainer.train(steps))
        trainer.config = dataclasses.replace(trainer.config, steps=trainer.step + steps)
        trainer.profiler = StepProfile(device, 5 * steps)
        trainer.train()
        return trainer.profiler.phases()
    except Exception as e:  # noqa: BLE001 - report it; the benchmark's other figures stand
        return {"unavailable": str(e)[:100]}
    finally:
        trainer.profiler = None
