"""Reads the maps a mip chain is trained for, and refuses maps it cannot honour.

The folder layout is the one ``ntc`` reads (``normal.png``, ``roughness.png``, ...). Only
the normal map is required: a missing roughness map takes the ``roughness`` parameter as a
constant, a missing albedo the ``albedo`` grey, a missing metalness map 0. Checks run
before any device work, so bad input ends with one line naming file and key and nothing
written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from bakery.errors import UsageError
from bakery.formats.images import load_image
from bakery.stages.mipmap.chain import check_size

#: How far a decoded texel's length may be from 1: 8-bit storage is off by < 0.01.
UNIT_TOLERANCE = 0.06


@dataclass(frozen=True)
class MipMaterial:
    normal: np.ndarray      # [H, W, 3] unit tangent-space normals (z up)
    roughness: np.ndarray   # [H, W, 1] perceptual roughness
    albedo: np.ndarray      # [H, W, 3] linear
    metalness: np.ndarray   # [H, W, 1]
    roughness_given: bool   # False: the constant from the parameter

    @property
    def size(self) -> tuple[int, int]:
        return self.normal.shape[1], self.normal.shape[0]


def srgb_to_linear(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 0.0, 1.0)
    return np.where(c <= 0.0031308, c * 12.92, 1.055 * c ** (1 / 2.4) - 0.055).astype(np.float32)


def decode_normals(stored: np.ndarray, *, where: str) -> np.ndarray:
    """[0, 1] storage -> unit vectors; refuses texels that are not (nearly) unit length."""
    if stored.shape[2] < 3:
        raise UsageError(f"normal map has {stored.shape[2]} channel(s); expected RGB = XYZ encoded as n * 0.5 + 0.5",
                         where=where, key="normal")
    n = stored[..., :3].astype(np.float32) * 2.0 - 1.0
    length = np.linalg.norm(n, axis=-1)
    bad = np.abs(length - 1.0) > UNIT_TOLERANCE
    if bad.any():
        y, x = map(int, np.argwhere(bad)[0])
        raise UsageError(f"{int(bad.sum())} texel(s) are not unit normals (first at x={x}, y={y}: length "
                         f"{length[y, x]:.3f}); expected a tangent-space normal map encoded as n * 0.5 + 0.5",
                         where=where, key="normal")
    return n / length[..., None]


def _single(files: Mapping[str, Path], role: str, shape, constant: float) -> tuple[np.ndarray, bool]:
    if role not in files:
        return np.full(shape + (1,), constant, np.float32), False
    img = load_image(files[role], key=role)
    _same_size(img, shape, files[role], role)
    return img[..., :1], True


def _same_size(img: np.ndarray, shape, path: Path, role: str) -> None:
    if img.shape[:2] != shape:
        raise UsageError(f"size {img.shape[1]}x{img.shape[0]} differs from the normal map's {shape[1]}x{shape[0]}",
                         where=str(path), key=role)


def load_mip_material(files: Mapping[str, Path], *, roughness: float, albedo: float) -> MipMaterial:
    """Loads and checks the maps; ``roughness``/``albedo`` stand in for absent maps."""
    if "normal" not in files:
        given = ", ".join(sorted(files)) or "none"
        raise UsageError(f"a normal map is required (given roles: {given})", key="normal")
    path = Path(files["normal"])
    stored = load_image(path, key="normal")
    h, w = stored.shape[:2]
    check_size(w, h, where=str(path), key="normal")
    normal = decode_normals(stored, where=str(path))
    rough, rough_given = _single(files, "roughness", (h, w), roughness)
    metal, _ = _single(files, "metalness", (h, w), 0.0)
    if "albedo" in files:
        a = load_image(files["albedo"], key="albedo")
        _same_size(a, (h, w), files["albedo"], "albedo")
        lin = srgb_to_linear(a[..., :3] if a.shape[2] >= 3 else np.repeat(a[..., :1], 3, axis=2))
    else:
        lin = np.full((h, w, 3), albedo, np.float32)
    return MipMaterial(normal=normal.astype(np.float32), roughness=rough.astype(np.float32),
                       albedo=lin.astype(np.float32), metalness=metal.astype(np.float32),
                       roughness_given=rough_given)
