"""The mip chain's geometry and its size policy.

Size policy: both sides must be powers of two (rectangles are fine) and the smaller side
at least 8, so every texel of level L is exactly the 2^L x 2^L block of level 0 it
replaces. Anything else is refused rather than padded or cropped: padding would invent
texels the renderer then averages in, cropping would drop authored ones, and both would
change the texture's tiling. The chain ends at the level whose smaller side is 4 (or at
``levels`` if asked for fewer): 4x4 is the smallest block a BCn format holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bakery.errors import UsageError

MIN_SIDE = 4


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def check_size(width: int, height: int, *, where: str, key: str) -> None:
    """Raises a UsageError naming the file unless the size is a mip-able power of two."""
    if not (_is_power_of_two(width) and _is_power_of_two(height)):
        raise UsageError(f"size {width}x{height} is not a power of two on both sides; mip levels must "
                         "halve exactly, so resize or crop the map first (bakery does not pad or crop)",
                         where=where, key=key)
    if min(width, height) < 2 * MIN_SIDE:
        raise UsageError(f"size {width}x{height} is too small: level 1 must be at least "
                         f"{MIN_SIDE}x{MIN_SIDE}", where=where, key=key)


@dataclass(frozen=True)
class MipChain:
    """Levels 0..deepest of a width x height map, packed texel-major one after another."""

    width: int
    height: int
    deepest: int

    @classmethod
    def for_size(cls, width: int, height: int, levels: int = 0) -> "MipChain":
        """``levels`` = 0: down to a smaller side of 4; otherwise at most that many levels below 0."""
        full = (min(width, height) // MIN_SIDE).bit_length() - 1
        return cls(width, height, full if levels <= 0 else min(levels, full))

    def shape(self, level: int) -> tuple[int, int]:
        """(height, width) of one level."""
        return self.height >> level, self.width >> level

    def count(self, level: int) -> int:
        h, w = self.shape(level)
        return h * w

    @property
    def offsets(self) -> list[int]:
        """Pyramid offset of each level 0..deepest, then the total."""
        out = [0]
        for level in range(self.deepest + 1):
            out.append(out[-1] + self.count(level))
        return out

    @property
    def texels0(self) -> int:
        return self.count(0)

    @property
    def pyramid(self) -> int:
        return self.offsets[-1]

    @property
    def mip_texels(self) -> int:
        """Texels of levels 1..deepest (the trained ones)."""
        return self.pyramid - self.texels0

    def level_table(self) -> np.ndarray:
        """uint32 [deepest + 2, 4]: (offset, width, height, 0) per level, then (total, 0, 0, 0)."""
        offs = self.offsets
        rows = [(offs[l], self.shape(l)[1], self.shape(l)[0], 0) for l in range(self.deepest + 1)]
        rows.append((offs[-1], 0, 0, 0))
        return np.asarray(rows, np.uint32)

    def pack(self, levels: list[np.ndarray]) -> np.ndarray:
        """Levels 1..deepest ([h, w, C] each) as one [mip texels, C] array."""
        return np.concatenate([a.reshape(-1, a.shape[-1]) for a in levels]).astype(np.float32)

    def unpack(self, packed: np.ndarray, channels: int) -> list[np.ndarray]:
        """Inverse of :meth:`pack`: [h, w, C] per level 1..deepest."""
        packed = packed.reshape(-1, channels)
        out, start = [], 0
        for level in range(1, self.deepest + 1):
            h, w = self.shape(level)
            out.append(packed[start:start + h * w].reshape(h, w, channels))
            start += h * w
        return out


def box_down(image: np.ndarray) -> np.ndarray:
    """2x2 area average of an [H, W, C] image (H, W even)."""
    h, w, c = image.shape
    return image.reshape(h // 2, 2, w // 2, 2, c).mean(axis=(1, 3))
