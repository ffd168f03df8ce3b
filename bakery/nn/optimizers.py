"""Adam and learning-rate schedules. The update itself runs in bakery/nn/adam.slang;
``adam_reference`` is the numpy definition it is tested against."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SCHEDULES = ("constant", "cosine", "one_cycle")


@dataclass(frozen=True)
class Adam:
    lr: float = 5e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def uniforms(self, step: int, lr: float, count: int, grad_scale: float) -> dict:
        """Kernel uniforms for update number ``step`` (1-based, as Adam's t)."""
        return {"count": count, "lr": lr, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps,
                "bias1": 1.0 - self.beta1 ** step, "bias2": 1.0 - self.beta2 ** step,
                "grad_scale": grad_scale}


def adam_reference(p, g, m, v, step: int, lr: float, opt: Adam):
    """One float32 Adam update in numpy, the same arithmetic as the Slang kernel."""
    f = np.float32
    m = f(opt.beta1) * m + f(1.0 - opt.beta1) * g
    v = f(opt.beta2) * v + f(1.0 - opt.beta2) * g * g
    denom = np.sqrt(v) / np.sqrt(f(1.0 - opt.beta2 ** step)) + f(opt.eps)
    p = p - f(lr / (1.0 - opt.beta1 ** step)) * (m / denom)
    return p.astype(np.float32), m.astype(np.float32), v.astype(np.float32)


def learning_rate(schedule: str, base: float, step: int, total: int, final_ratio: float = 0.1) -> float:
    """Learning rate for 0-based ``step`` of ``total``.

    cosine decays from ``base`` to ``base * final_ratio``; one_cycle warms up linearly
    over the first 10% then decays with a cosine (Smith's one-cycle policy).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")
    if schedule == "constant" or total <= 1:
        return base
    low = base * final_ratio
    if schedule == "cosine":
        t = step / (total - 1)
        return low + 0.5 * (base - low) * (1.0 + math.cos(math.pi * t))
    warm = max(1, int(0.1 * total))
    if step < warm:
        return low + (base - low) * (step + 1) / warm
    t = (step - warm) / max(1, total - 1 - warm)
    return low + 0.5 * (base - low) * (1.0 + math.cos(math.pi * t))
