"""Packed latent codes: the GPU-resident form of packed-mode latents (``latents.bin``).

Layout (little-endian 32-bit words, one buffer for every latent level): level k starts at
word ``word_offset[k]``; inside it, element ``e = (y * gw_k + x) * F + f`` (texel x, y,
feature f) is the code in bits ``[(e % n) * b, (e % n) * b + b)`` of word ``e // n``,
``n = 32 / b`` codes per word. A code c means the value ``c / (2^b - 1)``. Codes never
straddle words (b divides 32), so any texel is decoded with one load, a shift and a mask.
"""

from __future__ import annotations

import numpy as np

from bakery.stages.ntc.texture_set import LatentGridSpec


def codes_per_word(bits: int) -> int:
    return 32 // bits


def word_offsets(grid: LatentGridSpec) -> list[int]:
    """First word of each latent level; the last entry is the total word count."""
    n = codes_per_word(grid.bits)
    out, o = [], 0
    for w, h, f in grid.levels:
        out.append(o)
        o += -(-(w * h * f) // n)
    return out + [o]


def packed_bytes(grid: LatentGridSpec) -> int:
    return 4 * word_offsets(grid)[-1]


def quantize(values: np.ndarray, bits: int) -> np.ndarray:
    """Float latents -> integer codes (round to nearest, clamp to [0, 1] first)."""
    top = (1 << bits) - 1
    return np.round(np.clip(values, 0.0, 1.0) * top).astype(np.uint32)


def split_levels(grid: LatentGridSpec, flat: np.ndarray) -> list[np.ndarray]:
    """Flat latent array (all levels) -> per level [gh, gw, F]."""
    return [flat[o:o + w * h * f].reshape(h, w, f) for (w, h, f), o in zip(grid.levels, grid.level_offsets)]


def pack(grid: LatentGridSpec, levels: list[np.ndarray]) -> bytes:
    """Per-level integer codes [gh, gw, F] -> the bytes of latents.bin."""
    n, b = codes_per_word(grid.bits), grid.bits
    words = []
    for codes in levels:
        c = np.asarray(codes, np.uint32).reshape(-1)
        c = np.pad(c, (0, -c.size % n)).reshape(-1, n)
        shifts = (np.arange(n, dtype=np.uint32) * b)[None, :]
        words.append(np.bitwise_or.reduce(c << shifts, axis=1).astype(np.uint32))
    return np.concatenate(words).astype("<u4").tobytes()


def unpack(grid: LatentGridSpec, data: bytes) -> list[np.ndarray]:
    """The inverse of :func:`pack`: per-level codes [gh, gw, F] (uint8)."""
    n, b = codes_per_word(grid.bits), grid.bits
    words = np.frombuffer(data, "<u4")
    offsets = word_offsets(grid)
    if words.size != offsets[-1]:
        raise ValueError(f"latents.bin holds {words.size} words, the grid needs {offsets[-1]}")
    out = []
    for (w, h, f), o0, o1 in zip(grid.levels, offsets, offsets[1:]):
        shifts = (np.arange(n, dtype=np.uint32) * b)[None, :]
        codes = ((words[o0:o1, None] >> shifts) & ((1 << b) - 1)).reshape(-1)[: w * h * f]
        out.append(codes.reshape(h, w, f).astype(np.uint8))
    return out
