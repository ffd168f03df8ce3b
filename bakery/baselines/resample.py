"""Separable resampling in numpy: area (box) downsampling and half-texel-centred bilinear upsampling.

The same-bytes comparison shrinks each texture to the resolution a BCn set can afford
and brings it back the way a GPU would sample it: area averaging down (no aliasing, the
usual mip/resize filter, exact for fractional ratios), bilinear up with texel centres at
(i + 0.5) / size and clamped edges, as a sampler with CLAMP addressing does. Both run
one axis at a time in O(pixels), in the storage space the textures are shipped in.
"""

from __future__ import annotations

import numpy as np


def _area_axis(a: np.ndarray, dst: int, axis: int) -> np.ndarray:
    """Area average along ``axis`` through the integral of the piecewise-constant signal."""
    src = a.shape[axis]
    a = np.moveaxis(a, axis, 0)
    integral = np.concatenate([np.zeros((1,) + a.shape[1:]), np.cumsum(a, axis=0)], axis=0)
    edges = np.arange(dst + 1, dtype=np.float64) * (src / dst)
    i = np.minimum(np.floor(edges).astype(np.int64), src - 1)
    frac = (edges - i).reshape((-1,) + (1,) * (a.ndim - 1))
    at = integral[i] + frac * a[i]                       # integral up to each edge
    out = (at[1:] - at[:-1]) * (dst / src)
    return np.moveaxis(out, 0, axis)


def _bilinear_axis(a: np.ndarray, dst: int, axis: int) -> np.ndarray:
    src = a.shape[axis]
    a = np.moveaxis(a, axis, 0)
    u = np.clip((np.arange(dst, dtype=np.float64) + 0.5) * (src / dst) - 0.5, 0.0, src - 1.0)
    i0 = np.floor(u).astype(np.int64)
    i1 = np.minimum(i0 + 1, src - 1)
    t = (u - i0).reshape((-1,) + (1,) * (a.ndim - 1))
    return np.moveaxis(a[i0] * (1.0 - t) + a[i1] * t, 0, axis)


def _resample(image: np.ndarray, width: int, height: int, axis_fn) -> np.ndarray:
    if width < 1 or height < 1:
        raise ValueError(f"target size must be positive, got {width}x{height}")
    a = np.asarray(image, dtype=np.float64)
    out = axis_fn(axis_fn(a, height, 0), width, 1)
    return out.astype(np.float32)


def downsample_area(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """``[H, W, C]`` -> ``[height, width, C]`` by area averaging (any ratio, float32)."""
    return _resample(image, width, height, _area_axis)


def upsample_bilinear(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """``[h, w, C]`` -> ``[height, width, C]`` by bilinear filtering (half-texel centres, clamped edges)."""
    return _resample(image, width, height, _bilinear_axis)
