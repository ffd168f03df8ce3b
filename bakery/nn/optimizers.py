"""Adam, AdamW, AMSGrad and learning-rate schedules.

The updates run in bakery/nn/adam.slang (networks: Adam) and bakery/nn/adam_plain.slang
(plain parameter groups: all three); the ``*_reference`` functions are the numpy
definitions they are tested against.
"""

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

    #: Compile-time variant of bakery/nn/adam_plain.slang (see ``plain_defines``).
    variant = 0

    def plain_defines(self) -> str:
        """Defines that select this optimizer in bakery/nn/adam_plain.slang."""
        return f"#define BK_OPTIMIZER {self.variant}\n"

    def plain_uniforms(self) -> dict:
        """Uniforms of ``adam_plain_step`` besides :meth:`uniforms` (none for Adam)."""
        return {"weight_decay": 0.0}

    def uniforms(self, step: int, lr: float, count: int, grad_scale: float) -> dict:
        """Kernel uniforms for update number ``step`` (1-based, as Adam's t)."""
        return {"count": count, "lr": lr, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps,
                "bias1": 1.0 - self.beta1 ** step, "bias2": 1.0 - self.beta2 ** step,
                "grad_scale": grad_scale}


@dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p *= 1 - lr * weight_decay``
    before the Adam step, as PyTorch's AdamW does."""

    weight_decay: float = 1e-2
    variant = 1

    def plain_uniforms(self) -> dict:
        return {"weight_decay": self.weight_decay}


@dataclass(frozen=True)
class AMSGrad(Adam):
    """Adam whose denominator uses the running maximum of ``v`` (Reddi et al.), so the
    effective step size never grows: steadier on noisy, sparse gradients."""

    variant = 2


#: Optimizers by the name a stage parameter or spec uses.
OPTIMIZERS = {"adam": Adam, "adamw": AdamW, "amsgrad": AMSGrad}


def adam_reference(p, g, m, v, step: int, lr: float, opt: Adam):
    """One float32 Adam update in numpy, the same arithmetic as the Slang kernel."""
    f = np.float32
    m = f(opt.beta1) * m + f(1.0 - opt.beta1) * g
    v = f(opt.beta2) * v + f(1.0 - opt.beta2) * g * g
    denom = np.sqrt(v) / np.sqrt(f(1.0 - opt.beta2 ** step)) + f(opt.eps)
    p = p - f(lr / (1.0 - opt.beta1 ** step)) * (m / denom)
    return p.astype(np.float32), m.astype(np.float32), v.astype(np.float32)


def adamw_reference(p, g, m, v, step: int, lr: float, opt: AdamW):
    """One float32 AdamW update in numpy: decay, then the Adam step."""
    p = (p * np.float32(1.0 - lr * opt.weight_decay)).astype(np.float32)
    return adam_reference(p, g, m, v, step, lr, opt)


def amsgrad_reference(p, g, m, v, vmax, step: int, lr: float, opt: AMSGrad):
    """One float32 AMSGrad update in numpy; returns ``p, m, v, vmax``."""
    f = np.float32
    m = f(opt.beta1) * m + f(1.0 - opt.beta1) * g
    v = f(opt.beta2) * v + f(1.0 - opt.beta2) * g * g
    vmax = np.maximum(vmax, v)
    denom = np.sqrt(vmax) / np.sqrt(f(1.0 - opt.beta2 ** step)) + f(opt.eps)
    p = p - f(lr / (1.0 - opt.beta1 ** step)) * (m / denom)
    return p.astype(np.float32), m.astype(np.float32), v.astype(np.float32), vmax.astype(np.float32)


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
