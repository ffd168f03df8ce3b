"""BC4 latents: block compression that training emulates exactly and the export writes.

Why our own encoder: training must see the very values the hardware will decode, so the
encoder is a fixed rule that numpy evaluates on every refresh and the export repeats
bit for bit. Rule per 4x4 block (partial blocks padded by edge replication): endpoints
red_0 = round(255 * max), red_1 = round(255 * min); if they differ, the 8-value mode
(red_0 > red_1: palette red_0, red_1 and six interpolants (( 7 - i) red_0 + i red_1) / 7),
otherwise the block is flat; each texel takes the nearest palette entry. Values decode
as the palette / 255 in float, as GPUs do (integer decoders such as texture2ddecoder
round the interpolants, within 1/255). A standard BC4 block: any BC4 decoder reads it.
"""

from __future__ import annotations

import numpy as np

_INTERP = np.array([0, 7, 1, 2, 3, 4, 5, 6], np.float64)  # palette index -> weight of red_1 (in 7ths)


def _blocks(plane: np.ndarray) -> tuple[np.ndarray, int, int]:
    h, w = plane.shape
    ph, pw = -(-h // 4) * 4, -(-w // 4) * 4
    p = np.pad(plane, ((0, ph - h), (0, pw - w)), mode="edge")
    return p.reshape(ph // 4, 4, pw // 4, 4).transpose(0, 2, 1, 3).reshape(ph // 4, pw // 4, 16), ph, pw


def encode_plane(plane: np.ndarray) -> tuple[bytes, np.ndarray]:
    """One [h, w] plane in [0, 1] -> (BC4 blocks, the decoded [h, w] plane)."""
    h, w = plane.shape
    blk, ph, pw = _blocks(np.clip(plane.astype(np.float64), 0.0, 1.0))
    r0 = np.round(blk.max(-1) * 255.0)
    r1 = np.round(blk.min(-1) * 255.0)
    palette = ((7.0 - _INTERP) * r0[..., None] + _INTERP * r1[..., None]) / 7.0   # [by, bx, 8] in 0..255
    idx = np.abs(blk[..., :, None] * 255.0 - palette[..., None, :]).argmin(-1)  # [by, bx, 16]
    flat = r0 == r1
    idx[flat] = 0
    dec = np.take_along_axis(palette, idx, -1) / 255.0
    # pack: red_0, red_1, then 16 3-bit indices little-endian (48 bits)
    bits = np.zeros(idx.shape[:2], np.uint64)
    for i in range(16):
        bits |= idx[..., i].astype(np.uint64) << np.uint64(3 * i)
    raw = np.zeros(idx.shape[:2] + (8,), np.uint8)
    raw[..., 0] = r0.astype(np.uint8)
    raw[..., 1] = r1.astype(np.uint8)
    for k in range(6):
        raw[..., 2 + k] = ((bits >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.uint8)
    decoded = dec.reshape(ph // 4, pw // 4, 4, 4).transpose(0, 2, 1, 3).reshape(ph, pw)[:h, :w]
    return raw.tobytes(), decoded.astype(np.float32)


def encode_levels(levels: list[np.ndarray]) -> tuple[list[list[bytes]], list[np.ndarray]]:
    """Latent levels [gh, gw, F] -> (per level, per feature BC4 blocks; decoded levels)."""
    blocks, decoded = [], []
    for lv in levels:
        per, dec = [], np.empty(lv.shape, np.float32)
        for f in range(lv.shape[2]):
            b, d = encode_plane(lv[..., f])
            per.append(b)
            dec[..., f] = d
        blocks.append(per)
        decoded.append(dec)
    return blocks, decoded


def bc4_bytes(width: int, height: int) -> int:
    return -(-width // 4) * -(-height // 4) * 8


def decode_plane(data: bytes, width: int, height: int) -> np.ndarray:
    """BC4 blocks -> [height, width] float32 values, with the float palette of GPUs."""
    by, bx = -(-height // 4), -(-width // 4)
    raw = np.frombuffer(data, np.uint8).reshape(by, bx, 8)
    r0, r1 = raw[..., 0].astype(np.float64), raw[..., 1].astype(np.float64)
    bits = np.zeros((by, bx), np.uint64)
    for k in range(6):
        bits |= raw[..., 2 + k].astype(np.uint64) << np.uint64(8 * k)
    idx = np.stack([((bits >> np.uint64(3 * i)) & np.uint64(7)).astype(np.int64) for i in range(16)], -1)
    eight = ((7.0 - _INTERP) * r0[..., None] + _INTERP * r1[..., None]) / 7.0
    six_w = np.array([0, 5, 1, 2, 3, 4, 0, 0], np.float64)  # red_0 <= red_1: 4 interpolants in 5ths, then 0, 255
    six = ((5.0 - six_w) * r0[..., None] + six_w * r1[..., None]) / 5.0
    six[..., 6], six[..., 7] = 0.0, 255.0
    palette = np.where((r0 > r1)[..., None], eight, six)
    dec = np.take_along_axis(palette, idx, -1) / 255.0
    return dec.reshape(by, bx, 4, 4).transpose(0, 2, 1, 3).reshape(by * 4, bx * 4)[:height, :width].astype(np.float32)
