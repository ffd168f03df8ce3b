"""Image maths every stage shares: sRGB transfer, mip sizes and the box chain, PSNR.

One definition of each, so a texture measured by one stage and by its baseline is
measured the same way. Mip sizes follow the graphics APIs (``max(1, n >> k)`` per side,
D3D and Vulkan alike), which is also what makes non-square and non-power-of-two
textures work: an odd side's last texel is averaged with itself by the box filter.
"""

from __future__ import annotations

import numpy as np


# -- sRGB transfer (IEC 61966-2-1) ------------------------------------------------------
def srgb_to_linear(c: np.ndarray) -> np.ndarray:
    """sRGB-encoded values in [0, 1] to linear light (float32)."""
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb(c: np.ndarray) -> np.ndarray:
    """Linear light to sRGB-encoded values, clamped to [0, 1] first (float32)."""
    c = np.clip(c, 0.0, 1.0)
    return np.where(c <= 0.0031308, c * 12.92, 1.055 * c ** (1 / 2.4) - 0.055).astype(np.float32)


# -- mip chains -------------------------------------------------------------------------
def mip_size(size: int, level: int) -> int:
    """One side of mip ``level`` as GPUs size it: ``max(1, size >> level)``."""
    return max(1, size >> level)


def mip_count(width: int, height: int) -> int:
    """Levels of a full chain down to 1x1."""
    return max(width, height).bit_length()


def box_down(image: np.ndarray) -> np.ndarray:
    """The next mip level of an [H, W, C] image: 2x2 box filter to ``mip_size(n, 1)`` per
    side (an odd side's last texel is averaged with itself)."""
    h, w = image.shape[:2]
    nh, nw = mip_size(h, 1), mip_size(w, 1)
    if h % 2 == 0 and w % 2 == 0:   # strided views: no gathered copies (same sum, same order)
        ys, xs = [slice(d, h, 2) for d in (0, 1)], [slice(d, w, 2) for d in (0, 1)]
    else:
        ys = [np.minimum(2 * np.arange(nh) + d, h - 1) for d in (0, 1)]
        xs = [np.minimum(2 * np.arange(nw) + d, w - 1) for d in (0, 1)]
    return sum(image[y][:, x] for y in ys for x in xs) * 0.25


def box_chain(image: np.ndarray, count: int | None = None) -> list[np.ndarray]:
    """Levels 0..count-1 (all, down to 1x1, by default) of the 2x2 box chain, float32."""
    count = mip_count(image.shape[1], image.shape[0]) if count is None else count
    levels = [np.asarray(image, np.float32)]
    for _ in range(count - 1):
        levels.append(box_down(levels[-1]).astype(np.float32))
    return levels


# -- quantisation and PSNR --------------------------------------------------------------
def to_uint8(image: np.ndarray) -> np.ndarray:
    """Rounds a float image in [0, 1] to 8 bits (values outside are clamped)."""
    scaled = np.clip(np.asarray(image, dtype=np.float32), 0.0, 1.0)
    scaled *= 255.0   # in place: one temporary for a 2048^2 set instead of three
    scaled += 0.5
    return scaled.astype(np.uint8)


def psnr_from_mse(mse: float, peak: float = 1.0) -> float:
    """PSNR in dB of a mean squared error (inf for an exact match)."""
    return float("inf") if mse <= 0 else float(10.0 * np.log10(peak * peak / mse))


def psnr(a: np.ndarray, b: np.ndarray, peak: float = 1.0) -> float:
    """PSNR in dB after 8-bit quantisation of both images (the storage space)."""
    return psnr_uint8(to_uint8(a), to_uint8(b), peak)


#: (i / 255 - j / 255)^2 in float64 at [i * 256 + j]: each texel's squared error between
#: two 8-bit codes, exactly as float64 arithmetic on the codes gives it.
_SQUARED_STEP = ((np.arange(256, dtype=np.float64)[:, None] / 255.0
                  - np.arange(256, dtype=np.float64)[None, :] / 255.0) ** 2).reshape(-1)


def psnr_uint8(qa: np.ndarray, qb: np.ndarray, peak: float = 1.0) -> float:
    """:func:`psnr` of images already quantised by :func:`to_uint8` (a reference scored
    many times is quantised once). The squared errors are looked up per code pair rather
    than computed over float64 copies of both images: the same values summed in the same
    order, so the same PSNR to the bit, at a fraction of the memory traffic."""
    pairs = qa.astype(np.uint16)
    pairs <<= 8
    pairs |= qb
    mse = float(np.mean(_SQUARED_STEP[pairs]))
    return float("inf") if mse == 0 else 10.0 * np.log10(peak * peak / mse)


def set_psnr(values) -> float:
    """PSNR of a texture set from the mean of its textures' MSEs (each PSNR turned back
    into an MSE; a lossless texture counts as MSE 0). Unlike a mean of dB values it does
    not swing with a constant map that decodes to ~110 dB one step and inf the next."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("set_psnr of no textures")
    mse = float(np.mean([0.0 if np.isinf(v) else 10.0 ** (-v / 10.0) for v in values]))
    return float("inf") if mse == 0 else -10.0 * np.log10(mse)


def mean_psnr(values) -> float:
    """:func:`set_psnr`, the PSNR of the mean MSE (never an average of dB values, which
    would let one near-lossless map hide a 9 dB one); inf for no values."""
    values = list(values)
    return set_psnr(values) if values else float("inf")
