"""The mip chain's geometry and its size policy.

Level L is ``max(1, n >> L)`` per side, as engines size mips. The trained levels are
those where both sides still halve exactly, so every texel of level L is exactly the
2^L x 2^L block of level 0 it replaces: a 1024x512 map trains down to 4 texels a side, a
1000x600 one (1000 = 125 x 2^3) levels 1-3, ending at 125x75; an engine's own filter
makes the levels below. A map with an odd side has no exact level 1 and is refused
rather than padded or cropped: padding would invent texels the renderer then averages
in, cropping would drop authored ones, and both would change the texture's tiling. The
chain also ends at the level whose smaller side is 4 (or at ``levels`` if asked for
fewer): 4x4 is the smallest block a BCn format holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bakery.errors import UsageError

MIN_SIDE = 4


def exact_levels(width: int, height: int) -> int:
    """How many times both sides halve exactly (the trailing zero bits they share)."""
    both = width | height
    return (both & -both).bit_length() - 1 if both else 0


def check_size(width: int, height: int, *, where: str, key: str) -> None:
    """Raises a UsageError naming the file unless at least level 1 halves exactly and is
    at least 4x4."""
    if exact_levels(width, height) < 1:
        raise UsageError(f"size {width}x{height} has an odd side: mip level 1 would not be an exact 2x2 "
                         "average of level 0, so resize or crop the map to even sides first (bakery does not "
                         "pad or crop)", where=where, key=key)
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
        full = min((min(width, height) // MIN_SIDE).bit_length() - 1, exact_levels(width, height))
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
