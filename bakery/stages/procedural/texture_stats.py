"""Texture statistics: the mean and Gram matrix of local features at several scales.

Features per pixel: RGB, and the luminance difference to the pixel 1, 4 and 16 texels
to the right and below (pixels whose neighbours fall outside are left out). Matching their first and second moments matches
colour distribution, contrast per scale and orientation, and colour/edge correlation -
appearance, not noise phase - so a stochastic texture can be matched by a procedural one
with a different seed. fit.slang computes the same statistics on the device.
"""

from __future__ import annotations

import numpy as np

SCALES = (1, 4, 16)
FEATURES = 3 + 2 * len(SCALES)
STATS = FEATURES + FEATURES * (FEATURES + 1) // 2


def valid_size(width: int, height: int) -> tuple[int, int]:
    """The pixels whose neighbours at every scale lie inside the image (no wrapping: the
    statistics must not assume a tileable target)."""
    return max(1, width - SCALES[-1]), max(1, height - SCALES[-1])


def features(image: np.ndarray) -> np.ndarray:
    """[N, FEATURES] local features at the valid pixels of an RGB image (float64)."""
    img = np.asarray(image, np.float64)[:, :, :3]
    h, w = img.shape[:2]
    vw, vh = valid_size(w, h)
    luma = img.mean(axis=2)
    base = luma[:vh, :vw]
    cols = [img[:vh, :vw, 0], img[:vh, :vw, 1], img[:vh, :vw, 2]]
    for s in SCALES:
        cols.append(luma[:vh, min(s, w - 1):min(s, w - 1) + vw] - base)
        cols.append(luma[min(s, h - 1):min(s, h - 1) + vh, :vw] - base)
    return np.stack([c.reshape(-1) for c in cols], axis=1)


def statistics(image: np.ndarray) -> np.ndarray:
    """[STATS]: feature means, then the Gram matrix's upper triangle (row-major)."""
    f = features(image)
    gram = f.T @ f / f.shape[0]
    iu = np.triu_indices(FEATURES)
    return np.concatenate([f.mean(axis=0), gram[iu]])


def texture_loss(image: np.ndarray, target_stats: np.ndarray) -> float:
    """Squared distance between the statistics of ``image`` and the target's."""
    d = statistics(image) - np.asarray(target_stats, np.float64)
    return float(np.dot(d, d))
