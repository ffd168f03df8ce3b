"""The mipmap stage's shading inputs: what :func:`bakery.materials.load_textures` read,
as the maps a mip chain is trained for.

Only the normal map is required: a missing roughness map takes the ``roughness``
parameter as a constant, a missing albedo the ``albedo`` grey, a missing metalness map 0.
Checks run before any device work, so bad input ends with one line naming file and key
and nothing written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from bakery.errors import UsageError
from bakery.imaging import srgb_to_linear
from bakery.materials import load_textures, unit_normals
from bakery.stages.mipmap.chain import check_size


@dataclass(frozen=True)
class MipMaterial:
    normal: np.ndarray      # [H, W, 3] unit tangent-space normals (z up)
    roughness: np.ndarray   # [H, W, 1] perceptual roughness
    albedo: np.ndarray      # [H, W, 3] linear
    metalness: np.ndarray   # [H, W, 1]
    roughness_given: bool   # False: the constant from the parameter
    renormalised: int = 0   # normal texels that were off unit length (renormalised)
    ao: np.ndarray | None = None  # [H, W, 1] when given (packed into engine layouts' ORM/mask maps)
    notes: tuple[str, ...] = ()   # what loading chose for the user (bakery.materials.Textures.notes)

    @property
    def size(self) -> tuple[int, int]:
        return self.normal.shape[1], self.normal.shape[0]


def load_mip_material(files: Mapping[str, Path], *, roughness: float, albedo: float) -> MipMaterial:
    """Loads and checks the maps; ``roughness``/``albedo`` stand in for absent maps."""
    textures = load_textures(files, roles=("normal", "roughness", "albedo", "metalness", "ao"))
    if "normal" not in textures:
        given = ", ".join(sorted(textures)) or "none"
        raise UsageError(f"a normal map is required (given roles: {given})", key="normal")
    where = textures.source("normal")
    h, w = textures.shape
    check_size(w, h, where=where, key="normal")
    normal, _ = unit_normals(textures["normal"], where=where)

    def single(role: str, constant: float) -> np.ndarray:
        return textures[role] if role in textures else np.full((h, w, 1), constant, np.float32)

    if "albedo" in textures:
        a = textures["albedo"]
        lin = srgb_to_linear(a[..., :3] if a.shape[2] >= 3 else np.repeat(a[..., :1], 3, axis=2))
    else:
        lin = np.full((h, w, 3), albedo, np.float32)
    return MipMaterial(normal=normal.astype(np.float32), roughness=single("roughness", roughness).astype(np.float32),
                       albedo=lin.astype(np.float32), metalness=single("metalness", 0.0).astype(np.float32),
                       roughness_given="roughness" in textures, renormalised=textures.renormalised,
                       ao=textures["ao"] if "ao" in textures else None, notes=textures.notes)
