"""In-memory texture: a pixel format, a mip chain and array layers, as raw bytes.

Both containers (DDS, KTX2) write and read this one form, so a round trip through
either gives back the exact bytes. Uncompressed levels can be built from numpy arrays;
block-compressed levels (BC1/BC4/BC5/BC7) are taken as bytes from the stage that
encoded them, because bakery does not re-encode them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bakery.imaging import mip_count, mip_size


@dataclass(frozen=True)
class PixelFormat:
    """One storage format with its DXGI (DDS) and Vulkan (KTX2) numbers."""

    name: str
    dxgi: int
    vk: int
    block: int                 # 1 for uncompressed, 4 for BCn (4x4 texel blocks)
    block_bytes: int           # bytes per texel (uncompressed) or per 4x4 block
    channels: int
    numpy_dtype: str | None    # element type of an uncompressed level; None for BCn
    srgb: bool = False

    @property
    def compressed(self) -> bool:
        return self.block > 1

    def level_bytes(self, width: int, height: int) -> int:
        bw = -(-width // self.block)
        bh = -(-height // self.block)
        return bw * bh * self.block_bytes


FORMATS = {f.name: f for f in (
    PixelFormat("r8_unorm", 61, 9, 1, 1, 1, "u1"),
    PixelFormat("rg8_unorm", 49, 16, 1, 2, 2, "u1"),
    PixelFormat("rgba8_unorm", 28, 37, 1, 4, 4, "u1"),
    PixelFormat("rgba8_srgb", 29, 43, 1, 4, 4, "u1", srgb=True),
    PixelFormat("rgba16f", 10, 97, 1, 8, 4, "<f2"),
    PixelFormat("bc1_unorm", 71, 131, 4, 8, 4, None),
    PixelFormat("bc1_srgb", 72, 132, 4, 8, 4, None, srgb=True),
    PixelFormat("bc4_unorm", 80, 139, 4, 8, 1, None),
    PixelFormat("bc5_unorm", 83, 141, 4, 16, 2, None),
    PixelFormat("bc7_unorm", 98, 145, 4, 16, 4, None),
    PixelFormat("bc7_srgb", 99, 146, 4, 16, 4, None, srgb=True),
)}
BY_DXGI = {f.dxgi: f for f in FORMATS.values()}
BY_VK = {f.vk: f for f in FORMATS.values()}


def pixel_format(name: str) -> PixelFormat:
    if name not in FORMATS:
        raise ValueError(f"unknown texture format {name!r} (known: {', '.join(FORMATS)})")
    return FORMATS[name]


@dataclass(frozen=True)
class Texture:
    """A 2D texture or texture array. ``levels[mip][layer]`` is that surface's raw bytes."""

    format: PixelFormat
    width: int
    height: int
    levels: tuple[tuple[bytes, ...], ...]
    is_array: bool = False

    @property
    def layer_count(self) -> int:
        return len(self.levels[0])

    @property
    def level_count(self) -> int:
        return len(self.levels)

    def level_shape(self, mip: int) -> tuple[int, int]:
        return mip_size(self.height, mip), mip_size(self.width, mip)

    def check(self) -> None:
        """Raises ValueError unless every surface has exactly the size its format needs."""
        if self.width < 1 or self.height < 1:
            raise ValueError(f"texture size {self.width}x{self.height} must be positive")
        if not 1 <= self.level_count <= mip_count(self.width, self.height):
            raise ValueError(f"{self.level_count} mip levels for {self.width}x{self.height} "
                             f"(at most {mip_count(self.width, self.height)})")
        if self.layer_count < 1 or (self.layer_count > 1 and not self.is_array):
            raise ValueError(f"{self.layer_count} layers in a non-array texture")
        for m, level in enumerate(self.levels):
            if len(level) != self.layer_count:
                raise ValueError(f"mip {m} has {len(level)} layers, mip 0 has {self.layer_count}")
            h, w = self.level_shape(m)
            need = self.format.level_bytes(w, h)
            for i, surface in enumerate(level):
                if len(surface) != need:
                    raise ValueError(f"mip {m} layer {i}: {len(surface)} bytes, {self.format.name} "
                                     f"{w}x{h} needs {need}")

    def array(self, mip: int = 0, layer: int = 0) -> np.ndarray:
        """An uncompressed surface as [H, W, C] (uint8 or float16)."""
        if self.format.compressed:
            raise ValueError(f"{self.format.name} is block-compressed; use levels[mip][layer] bytes")
        h, w = self.level_shape(mip)
        return np.frombuffer(self.levels[mip][layer], dtype=self.format.numpy_dtype).reshape(
            h, w, self.format.channels)


def _surface_bytes(fmt: PixelFormat, a: np.ndarray) -> bytes:
    """Raw bytes of one uncompressed [H, W, C] surface; floats in [0, 1] are quantised for UNORM."""
    a = np.asarray(a)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] != fmt.channels:
        raise ValueError(f"{fmt.name} needs [H, W, {fmt.channels}] arrays, got shape {a.shape}")
    if fmt.numpy_dtype == "u1":
        if a.dtype != np.uint8:
            if not np.issubdtype(a.dtype, np.floating):
                raise ValueError(f"{fmt.name} takes uint8 or float arrays in [0, 1], got {a.dtype}")
            a = (np.clip(a, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    else:
        a = a.astype(fmt.numpy_dtype)
    return np.ascontiguousarray(a).tobytes()


def make_texture(format: str, mips: Sequence, *, width: int | None = None, height: int | None = None,
                 array: bool | None = None) -> Texture:
    """Builds a checked :class:`Texture`.

    ``mips[m]`` is one mip level: for uncompressed formats an array [H, W, C] (or
    [layers, H, W, C] for an array texture); for block-compressed formats ``bytes``
    (one layer) or a list of ``bytes`` (one per layer), with ``width``/``height`` given.
    """
    fmt = pixel_format(format)
    if not len(mips):
        raise ValueError("a texture needs at least one mip level")
    levels = []
    layered = False
    for m in mips:
        if fmt.compressed:
            if isinstance(m, (bytes, bytearray, memoryview)):
                levels.append((bytes(m),))
            else:
                layered = True
                levels.append(tuple(bytes(s) for s in m))
        else:
            a = np.asarray(m)
            if a.ndim == 4:
                layered = True
                levels.append(tuple(_surface_bytes(fmt, s) for s in a))
            else:
                levels.append((_surface_bytes(fmt, a),))
    if not fmt.compressed:
        a0 = np.asarray(mips[0])
        h0, w0 = a0.shape if a0.ndim == 2 else a0.shape[-3:-1]
        height, width = height or int(h0), width or int(w0)
    if width is None or height is None:
        raise ValueError(f"{fmt.name} levels are bytes: give width and height")
    tex = Texture(fmt, int(width), int(height), tuple(levels), layered if array is None else bool(array))
    tex.check()
    return tex
