"""Light/view directions on the hemisphere from a seed: the numpy twin of directions.slang.

``draw_directions`` reproduces the GPU's draws bit for bit in the hash (the float maths
may differ in the last ulp), so a held-out evaluation set can be made on either side and
training batches can be inspected from Python.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = 0x9E3779B9


def pcg(v):
    """The hash of bakery/nn/random.slang on uint32 arrays."""
    v = np.asarray(v, np.uint32)
    with np.errstate(over="ignore"):
        state = v * np.uint32(747796405) + np.uint32(2891336453)
        word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


def hash3(a, b, c):
    return pcg(np.asarray(a, np.uint32) ^ pcg(np.asarray(b, np.uint32) ^ pcg(c)))


def unorm(h):
    return (np.asarray(h, np.uint32) >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def hemisphere_uniform(u, min_cos: float = 0.0):
    """Uniform in solid angle over the cap z >= ``min_cos``; ``u`` has shape (..., 2)."""
    u = np.asarray(u, np.float64)
    z = min_cos + (1.0 - min_cos) * u[..., 0]
    r = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = 2.0 * np.pi * u[..., 1]
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=-1)


def hemisphere_cosine(u):
    """Cosine-weighted directions; ``u`` has shape (..., 2)."""
    u = np.asarray(u, np.float64)
    r = np.sqrt(u[..., 0])
    phi = 2.0 * np.pi * u[..., 1]
    return np.stack([r * np.cos(phi), r * np.sin(phi), np.sqrt(np.maximum(0.0, 1.0 - u[..., 0]))], axis=-1)


def draw_unit2(seed: int, step, index, stream: int):
    with np.errstate(over="ignore"):
        salt = np.uint32(seed) ^ (np.uint32(stream) * np.uint32(_GOLDEN))
    h = hash3(salt, step, index)
    return np.stack([unorm(h), unorm(pcg(h))], axis=-1)


def draw_directions(seed: int, count: int, *, step: int = 0, stream: int = 0, min_cos: float = 0.0):
    """``count`` directions as ``bk_draw_direction(seed, step, index, stream, min_cos)`` draws them."""
    index = np.arange(count, dtype=np.uint32)
    return hemisphere_uniform(draw_unit2(seed, np.full(count, step, np.uint32), index, stream), min_cos)
