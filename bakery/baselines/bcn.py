"""BC1/BC4/BC5/BC7 encode and decode of one surface, through ispc-texcomp and texture2ddecoder.

Why a wrapper: the bindings take raw 8-bit surfaces with format-specific strides and
decode to BGRA, and they only encode whole 4x4 blocks. Here every format takes a float
(or uint8) ``[H, W, C]`` image, pads it to a multiple of 4 by edge replication (so the
padding does not pull block endpoints towards black) and crops the decode back.

Binding quirks found while building this (ispc-texcomp 1.0.1, texture2ddecoder 1.0.6):

* BC4 reads an R8 surface (stride = width) and BC5 an RG8 surface (stride = 2*width);
  given an RGBA surface they compress the wrong bytes without complaint.
* ``compress_blocks_bc1`` returns a buffer of width*height bytes (an 8 bpp size) whose
  second half is uninitialised memory, so it differs run to run; only the first
  width*height/2 bytes are BC1 blocks, and we keep only those.
* The package README's ``CompressBlocksBC7`` names are stale; the functions are
  ``compress_blocks_bc7`` etc. BC7 profiles without the ``alpha_`` prefix ignore alpha.
* Decoders return BGRA; BC4 lands in the R (index 2) channel, BC5 in R and G.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from bakery.imaging import to_uint8
from bakery.overlap import yield_cpu

BLOCK = 4
BC7_PROFILES = ("ultrafast", "veryfast", "fast", "basic", "slow")


@dataclass(frozen=True)
class BcFormat:
    name: str
    block_bytes: int      # bytes per 4x4 block
    channels: int         # channels the format stores (BC7: 3, or 4 with alpha)

    @property
    def bpp(self) -> int:
        return self.block_bytes * 8 // (BLOCK * BLOCK)


FORMATS = {f.name: f for f in (BcFormat("bc1", 8, 3), BcFormat("bc4", 8, 1),
                               BcFormat("bc5", 16, 2), BcFormat("bc7", 16, 4))}


def bc_format(fmt: str) -> BcFormat:
    if fmt not in FORMATS:
        raise ValueError(f"unknown BCn format {fmt!r} (known: {', '.join(FORMATS)})")
    return FORMATS[fmt]


def padded_size(width: int, height: int) -> tuple[int, int]:
    """Width and height rounded up to whole 4x4 blocks."""
    return -(-width // BLOCK) * BLOCK, -(-height // BLOCK) * BLOCK


def encoded_size(fmt: str, width: int, height: int) -> int:
    """Bytes of one BCn surface of this size (partial blocks count as whole ones)."""
    pw, ph = padded_size(width, height)
    return (pw // BLOCK) * (ph // BLOCK) * bc_format(fmt).block_bytes


def _as_u8(image: np.ndarray) -> np.ndarray:
    a = np.asarray(image)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"expected an [H, W, C] image, got shape {a.shape}")
    if a.dtype == np.uint8:
        return a
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"expected uint8 or float in [0, 1], got {a.dtype}")
    return to_uint8(a)


def _pad(a: np.ndarray) -> np.ndarray:
    h, w = a.shape[:2]
    pw, ph = padded_size(w, h)
    if (pw, ph) == (w, h):
        return np.ascontiguousarray(a)
    return np.ascontiguousarray(np.pad(a, ((0, ph - h), (0, pw - w), (0, 0)), mode="edge"))


def encode(image: np.ndarray, fmt: str, *, profile: str = "basic") -> bytes:
    """BCn blocks (row-major 4x4 blocks, as DDS stores them) of an ``[H, W, C]`` image.

    Channels: BC4 1, BC5 2, BC1 3, BC7 3 (opaque) or 4 (alpha, uses the ``alpha_``
    profile). Floats are rounded to 8 bits first. ``profile`` picks the BC7 speed/quality
    preset (``basic``: ~0.3 s per 512^2 on one core). Deterministic.
    """
    bc_format(fmt)                   # rejects unknown names
    a = _as_u8(image)
    h, w, c = a.shape
    ok = {"bc4": (1,), "bc5": (2,), "bc1": (3,), "bc7": (3, 4)}[fmt]
    if c not in ok:
        raise ValueError(f"{fmt} encodes {' or '.join(map(str, ok))} channels, got {c}")
    if fmt == "bc7" and profile not in BC7_PROFILES:
        raise ValueError(f"unknown BC7 profile {profile!r} (known: {', '.join(BC7_PROFILES)})")
    a = _pad(a)
    ph, pw = a.shape[:2]
    bands = _band_rows(fmt, pw, ph)
    if len(bands) == 1:
        return _compress(a, fmt, profile)
    # every 4x4 block encodes on its own: bands of block rows on threads give the same bytes
    parts: list[bytes | BaseException | None] = [None] * len(bands)

    def work(i: int, rows: slice) -> None:
        yield_cpu()   # the bands are side work, wherever the encode was asked for
        try:
            with _ENCODING:
                parts[i] = _compress(a[rows], fmt, profile)
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread below
            parts[i] = e

    threads = [threading.Thread(target=work, args=(i, rows), daemon=True) for i, rows in enumerate(bands)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for part in parts:
        if isinstance(part, BaseException):
            raise part
    return b"".join(parts)


#: Texels from which BC7/BC1 (seconds per 2K map on one core) encode in bands on several
#: threads; BC4/BC5 take milliseconds and stay on one.
PARALLEL_FROM = 1 << 20
#: Bands encoding at once in this process, however many encodes run (bakery.overlap runs
#: several beside training): one core stays free for the thread that drives the device.
def encode_threads() -> int:
    return max(1, (os.cpu_count() or 1) - 1)


_ENCODING = threading.BoundedSemaphore(encode_threads())


def _band_rows(fmt: str, pw: int, ph: int, threads: int | None = None) -> list[slice]:
    """Row slices (whole block rows) of a padded surface, one per encoding thread."""
    threads = threads or encode_threads()
    if fmt not in ("bc7", "bc1") or pw * ph < PARALLEL_FROM or threads < 2:
        return [slice(0, ph)]
    block_rows = ph // BLOCK
    n = min(threads, block_rows)
    edges = [BLOCK * (block_rows * k // n) for k in range(n + 1)]
    return [slice(lo, hi) for lo, hi in zip(edges, edges[1:])]


def _compress(a: np.ndarray, fmt: str, profile: str) -> bytes:
    """ispc-texcomp over one padded uint8 surface; exactly its blocks' bytes."""
    import ispc_texcomp as itc

    ph, pw, c = a.shape
    if fmt in ("bc4", "bc5"):
        surface = itc.RGBASurface(np.ascontiguousarray(a).tobytes(), pw, ph, pw * c)
        blocks = (itc.compress_blocks_bc4 if fmt == "bc4" else itc.compress_blocks_bc5)(surface)
    else:
        rgba = np.concatenate([a, np.full((ph, pw, 1), 255, np.uint8)], axis=2) if c == 3 else a
        surface = itc.RGBASurface(np.ascontiguousarray(rgba).tobytes(), pw, ph, pw * 4)
        if fmt == "bc1":
            blocks = itc.compress_blocks_bc1(surface)
        else:
            settings = itc.BC7EncSettings.from_profile(profile if c == 3 else "alpha_" + profile)
            blocks = itc.compress_blocks_bc7(surface, settings)
    need = encoded_size(fmt, pw, ph)
    if len(blocks) < need:
        raise RuntimeError(f"ispc-texcomp returned {len(blocks)} bytes for {fmt} {pw}x{ph}, expected {need}")
    return bytes(blocks[:need])


def decode(blocks: bytes, fmt: str, width: int, height: int, *, channels: int | None = None) -> np.ndarray:
    """float32 ``[height, width, C]`` in [0, 1] from BCn blocks made by :func:`encode`.

    C is the format's stored channels (BC4 1, BC5 2, BC1 3, BC7 3); pass ``channels=4``
    for BC7/BC1 alpha.
    """
    import texture2ddecoder as t2d

    f = bc_format(fmt)
    need = encoded_size(fmt, width, height)
    if len(blocks) != need:
        raise ValueError(f"{fmt} {width}x{height} needs {need} bytes, got {len(blocks)}")
    pw, ph = padded_size(width, height)
    fn = {"bc1": t2d.decode_bc1, "bc4": t2d.decode_bc4, "bc5": t2d.decode_bc5, "bc7": t2d.decode_bc7}[fmt]
    bgra = np.frombuffer(fn(bytes(blocks), pw, ph), np.uint8).reshape(ph, pw, 4)[:height, :width]
    rgba = bgra[:, :, [2, 1, 0, 3]]
    c = channels or (3 if fmt == "bc7" else f.channels)
    if not 1 <= c <= 4 or (c > f.channels and fmt not in ("bc1", "bc7")):
        raise ValueError(f"{fmt} decodes at most {f.channels} channels, asked for {c}")
    return rgba[:, :, :c].astype(np.float32) / 255.0
