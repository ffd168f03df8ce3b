"""The classical shipping set for one material and its report, at full resolution and at equal bytes.

Role -> format as studios ship it: albedo BC7, normal BC5 (XY; Z rebuilt in the shader),
roughness/metalness/ao/height BC4, other single-channel maps BC4, two-channel maps BC5,
RGB(A) maps BC7. PSNR is measured in the 8-bit storage space
(:func:`bakery.formats.images.psnr`), the same way the neural set is measured.

The same-bytes comparison answers "what if the neural set's bytes were spent on BCn
instead": every texture is area-downsampled to the resolution where the whole BCn set
costs the neural set's bytes, encoded and decoded there, and upsampled bilinearly back.
"""

from __future__ import annotations

import math

import numpy as np

from bakery.baselines import bcn
from bakery.baselines.resample import downsample_area, upsample_bilinear
from bakery.imaging import mean_psnr, psnr

ROLE_FORMATS = {"albedo": "bc7", "normal": "bc5", "roughness": "bc4", "metalness": "bc4",
                "ao": "bc4", "height": "bc4"}
SINGLE_CHANNEL_ROLES = ("roughness", "metalness", "ao", "height")


def format_for(role: str, channels: int) -> str:
    """BCn format a studio would ship this role in (unknown roles go by channel count)."""
    if role in ROLE_FORMATS:
        return ROLE_FORMATS[role]
    if channels == 1:
        return "bc4"
    if channels == 2:
        return "bc5"
    if channels in (3, 4):
        return "bc7"
    raise ValueError(f"texture {role!r}: {channels} channels, BCn stores 1 to 4")


def stored_channels(role: str, image: np.ndarray, fmt: str) -> np.ndarray:
    """The channels the BCn format keeps: normal XY for BC5, the first channel for BC4.

    Height maps are often 16-bit; BC4 keeps 8 bits of them, so the baseline quantises
    height to 8 bits like every other map (PSNR is measured in 8 bits anyway).
    """
    if fmt == "bc4":
        return image[:, :, :1]
    if fmt == "bc5":
        return image[:, :, :2]
    if image.shape[2] == 1:          # a grey map given to BC7: ship it as RGB
        return np.repeat(image, 3, axis=2)
    if image.shape[2] == 2:
        return np.concatenate([image, np.zeros_like(image[:, :, :1])], axis=2)
    return image


def reconstruct_normal(xy: np.ndarray) -> np.ndarray:
    """3-channel storage-space normal map from stored XY: z = sqrt(1 - x^2 - y^2) in [-1, 1] space."""
    v = xy.astype(np.float32) * 2.0 - 1.0
    z = np.sqrt(np.clip(1.0 - v[:, :, 0] ** 2 - v[:, :, 1] ** 2, 0.0, None))
    return np.concatenate([xy.astype(np.float32), (z * 0.5 + 0.5)[:, :, None]], axis=2)


def _as_shipped(role: str, original: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """What a shader reads back, shaped like the original for the PSNR."""
    if role == "normal" and original.shape[2] >= 3:
        return reconstruct_normal(decoded[:, :, :2])
    if decoded.shape[2] > original.shape[2]:     # grey shipped as RGB
        return decoded[:, :, :original.shape[2]]
    return decoded


def _compared(role: str, original: np.ndarray, fmt: str) -> np.ndarray:
    """The part of the original the PSNR is taken on (all of a normal map; BC4's one channel)."""
    if fmt == "bc4":
        return original[:, :, :1]
    if role == "normal":
        return original[:, :, :3]
    return original if fmt != "bc5" else original[:, :, :2]


def round_trip(role: str, image: np.ndarray, fmt: str, width: int | None = None, height: int | None = None,
               *, profile: str = "basic") -> tuple[bytes, np.ndarray]:
    """Encode (at ``width`` x ``height`` after area downsampling, if given) and decode back
    to the original size; returns the blocks and the image as the shader would read it."""
    h, w = image.shape[:2]
    width, height = width or w, height or h
    stored = stored_channels(role, image, fmt)
    small = stored if (width, height) == (w, h) else downsample_area(stored, width, height)
    blocks = bcn.encode(small, fmt, profile=profile)
    dec = bcn.decode(blocks, fmt, width, height, channels=stored.shape[2])
    if (width, height) != (w, h):
        dec = np.clip(upsample_bilinear(dec, w, h), 0.0, 1.0)
    return blocks, _as_shipped(role, image, dec)


def same_bytes_size(width: int, height: int, set_block_bytes: int, budget_bytes: float) -> tuple[int, int]:
    """Block-aligned (w, h), at least 4x4 and at most the full size, whose BCn set bytes are
    nearest ``budget_bytes``: w from the scale s, then h so the total misses by < half a block row."""
    full_w, full_h = bcn.padded_size(width, height)
    full_bw, full_bh = full_w // 4, full_h // 4
    blocks = budget_bytes / set_block_bytes                     # 4x4 block positions we can afford
    s = math.sqrt(blocks / (full_bw * full_bh))
    bw = min(full_bw, max(1, round(full_bw * s)))
    bh = min(full_bh, max(1, round(blocks / bw)))
    return bw * 4, bh * 4


def baseline_report(textures: dict[str, np.ndarray], neural_bpp: float | None = None, *,
                    profile: str = "basic", return_images: bool = False):
    """Per-texture format, bpp, bytes and PSNR of the BCn shipping set, plus set totals.

    ``textures``: role -> float32 [H, W, C] in [0, 1], all the same size. With
    ``neural_bpp`` (bits per texel of the whole neural set), adds the same-bytes
    comparison under ``same_bytes`` and per texture. With ``return_images``, returns
    ``(report, {role: full-res decoded image})`` for previews. Deterministic (no timings).
    """
    if not textures:
        raise ValueError("no textures to compare")
    sizes = {tuple(np.asarray(t).shape[:2]) for t in textures.values()}
    if len(sizes) != 1:
        raise ValueError(f"textures differ in size: {sorted(sizes)}; resample them first")
    (h, w), = sizes
    images = {role: np.asarray(t, dtype=np.float32) if np.asarray(t).ndim == 3
              else np.asarray(t, dtype=np.float32)[:, :, None] for role, t in textures.items()}
    fmts = {role: format_for(role, a.shape[2]) for role, a in images.items()}

    per: dict[str, dict] = {}
    decoded: dict[str, np.ndarray] = {}
    for role in sorted(images):
        a, fmt = images[role], fmts[role]
        blocks, out = round_trip(role, a, fmt, profile=profile)
        decoded[role] = out
        per[role] = {"format": fmt, "bpp": bcn.bc_format(fmt).bpp, "bytes": len(blocks),
                     "psnr": float(psnr(_compared(role, a, fmt), out))}
    total_bpp = sum(t["bpp"] for t in per.values())
    report = {"encoder": _encoder_info(profile), "width": w, "height": h, "textures": per,
              "total": {"bpp": total_bpp, "bytes": sum(t["bytes"] for t in per.values()),
                        "mean_psnr": mean_psnr(t["psnr"] for t in per.values())}}

    if neural_bpp is not None:
        if not neural_bpp > 0:
            raise ValueError(f"neural_bpp must be positive, got {neural_bpp}")
        budget = neural_bpp * w * h / 8.0
        set_block_bytes = sum(bcn.bc_format(f).block_bytes for f in fmts.values())
        sw, sh = same_bytes_size(w, h, set_block_bytes, budget)
        sb_psnr = {}
        for role in sorted(images):
            a, fmt = images[role], fmts[role]
            _, out = round_trip(role, a, fmt, sw, sh, profile=profile)
            sb_psnr[role] = float(psnr(_compared(role, a, fmt), out))
            per[role]["same_bytes_psnr"] = sb_psnr[role]
        sb_bytes = (sw // 4) * (sh // 4) * set_block_bytes
        report["same_bytes"] = {
            "neural_bpp": float(neural_bpp), "budget_bytes": budget,
            "scale": math.sqrt(neural_bpp / total_bpp), "width": sw, "height": sh,
            "bytes": sb_bytes, "bpp": sb_bytes * 8.0 / (w * h),
            "capped_at_full_resolution": neural_bpp > total_bpp,
            "mean_psnr": mean_psnr(sb_psnr.values())}
    return (report, decoded) if return_images else report


def _encoder_info(profile: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def v(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return "unknown"
    return {"encoder": "ispc-texcomp", "encoder_version": v("ispc-texcomp"), "bc7_profile": profile,
            "decoder": "texture2ddecoder", "decoder_version": v("texture2ddecoder")}


def same_bytes_image(image: np.ndarray, budget_bytes: float, *, role: str = "image",
                     profile: str = "basic") -> dict:
    """One image in the BCn format a studio would ship it in (BC7 for colour), area-downsampled
    to the size whose blocks cost ``budget_bytes``, decoded and upsampled back: its PSNR,
    the size it was stored at and its bytes. The baseline of a single-texture result of
    ``budget_bytes`` (a network's weights, a procedural program)."""
    image = np.asarray(image, np.float32)
    if image.ndim == 2:
        image = image[:, :, None]
    h, w, c = image.shape
    fmt = format_for(role, c)
    sw, sh = same_bytes_size(w, h, bcn.bc_format(fmt).block_bytes, budget_bytes)
    blocks, out = round_trip(role, image, fmt, sw, sh, profile=profile)
    return {"format": fmt, "width": sw, "height": sh, "bytes": len(blocks),
            "psnr": float(psnr(_compared(role, image, fmt), out))}
