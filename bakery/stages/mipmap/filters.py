"""The classical mip filters the trained chain is measured against.

* box: average the normals (then renormalise) and the roughness.
* Toksvig (2005): the averaged unit normal's length |Na| < 1 measures how much the normals
  spread; variance = (1 - |Na|) / |Na| widens the lobe through the Blinn-Phong power,
  s' = s / (1 + variance * s), converted to and from GGX alpha by s = 2 / alpha^2 - 2.
* vMF (Han et al. 2007, "Frequency domain normal map filtering"): fit a von Mises-Fisher lobe to the
  normals, kappa = (3r - r^3) / (1 - r^2) with r = |Na|, and add its spread to the
  lobe: alpha'^2 = alpha^2 + 1 / kappa.

Roughness here is perceptual (alpha = roughness^2), as the BRDF takes it. Every filter
works level to level from level 0's blocks (never from the previous filtered level),
so each level is the filter of exactly the texels it covers.
"""

from __future__ import annotations

import numpy as np

FILTERS = ("box", "toksvig", "vmf")
_EPS = 1e-6


def _block_mean(image: np.ndarray, level: int) -> np.ndarray:
    h, w, c = image.shape
    f = 1 << level
    return image.reshape(h // f, f, w // f, f, c).mean(axis=(1, 3))


def _normalize(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), _EPS)


def filter_level(normal0: np.ndarray, rough0: np.ndarray, level: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(unit normals [h, w, 3], perceptual roughness [h, w, 1]) of ``level`` by filter ``kind``."""
    if kind not in FILTERS:
        raise ValueError(f"unknown mip filter {kind!r} (known: {', '.join(FILTERS)})")
    mean_n = _block_mean(normal0.astype(np.float64), level)
    rough = _block_mean(rough0.astype(np.float64), level)
    length = np.clip(np.linalg.norm(mean_n, axis=-1, keepdims=True), _EPS, 1.0)
    normal = _normalize(mean_n)
    if kind == "box":
        return normal.astype(np.float32), rough.astype(np.float32)
    alpha2 = np.maximum(rough, 0.0) ** 4
    if kind == "toksvig":
        variance = (1.0 - length) / length
        power = 2.0 / np.maximum(alpha2, _EPS) - 2.0
        power = power / (1.0 + variance * power)
        alpha2 = 2.0 / (power + 2.0)
    else:
        r = np.minimum(length, 1.0 - _EPS)
        kappa = (3.0 * r - r ** 3) / (1.0 - r * r)
        alpha2 = alpha2 + 1.0 / kappa
    rough = np.clip(alpha2, 0.0, 1.0) ** 0.25
    return normal.astype(np.float32), rough.astype(np.float32)
