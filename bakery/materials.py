"""Texture roles and material texture sets: the one table of what a role is.

A pipeline asset names its files by role (``image``, ``albedo``, ``normal``, ...); a
material folder's files are matched to roles by stem. Stages that read a whole material
stack its textures as one multi-channel image, in the table's role order, so a decoder's
outputs map to textures the same way in every bundle. Colour (albedo) stays in its sRGB
storage space: a loss compares what the engine will sample. Normals are 3 channels in
[0, 1] storage space, renormalised after decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from bakery.errors import UsageError
from bakery.formats.images import load_image

@dataclass(frozen=True)
class Role:
    """What one texture role holds."""

    channels: int | None      # channels kept (None: as the file has)
    srgb: bool = False        # authored in sRGB: BC1/BC7 outputs are tagged sRGB
    in_material_set: bool = True  # stacked into a material set (False: read on its own)


#: Every role a pipeline asset may declare; material-set roles in channel order.
ROLE_TABLE = {
    "albedo": Role(None, srgb=True), "normal": Role(3), "roughness": Role(1), "metalness": Role(1),
    "ao": Role(1), "height": Role(1), "emissive": Role(3), "opacity": Role(1), "specular": Role(1),
    "image": Role(None, in_material_set=False), "displacement": Role(1, in_material_set=False),
    "mask": Role(1, in_material_set=False),
}
#: Roles a material set stacks, in channel order, with their channel counts.
ROLES = {name: r.channels for name, r in ROLE_TABLE.items() if r.in_material_set}
#: Roles authored in sRGB.
SRGB_ROLES = tuple(name for name, r in ROLE_TABLE.items() if r.srgb)
MAX_CHANNELS = 16


@dataclass(frozen=True)
class MaterialSet:
    roles: tuple[str, ...]
    slices: tuple[tuple[int, int], ...]  # (first channel, channel count) per role
    image: np.ndarray                    # [H, W, C] float32
    renormalised: int = 0                # normal texels that were off unit (see unit_normals)

    @property
    def channels(self) -> int:
        return self.image.shape[2]

    @property
    def normal_channel(self) -> int:
        return self.slices[self.roles.index("normal")][0] if "normal" in self.roles else -1

    def split(self, image: np.ndarray) -> dict[str, np.ndarray]:
        return {r: image[..., a:a + n] for r, (a, n) in zip(self.roles, self.slices)}


#: How far a decoded normal's length may be from 1 and still count as unit: 8-bit storage
#: is off by < 0.01, JPEG and resized maps by more.
UNIT_TOLERANCE = 0.06
#: Shorter than this, a normal has no direction to renormalise to: a few 8-bit steps
#: around the (128, 128, 128) "no normal" texel point anywhere.
MIN_NORMAL_LENGTH = 0.05


def unit_normals(stored: np.ndarray, *, where: str) -> tuple[np.ndarray, int]:
    """The one normal-map policy of every stage: [0, 1] storage -> unit vectors, and how
    many texels were off unit length by more than 8-bit storage explains (JPEG, resized
    maps; renormalised, the caller logs the count). Zero-length or non-finite texels have
    no direction and are refused with one line naming the first."""
    n = stored[..., :3].astype(np.float32) * 2.0 - 1.0
    length = np.linalg.norm(n, axis=-1)
    bad = ~np.isfinite(length) | (length < MIN_NORMAL_LENGTH)
    if bad.any():
        y, x = map(int, np.argwhere(bad)[0])
        raise UsageError(f"{int(bad.sum())} texel(s) have no direction (first at x={x}, y={y}: length "
                         f"{length[y, x]:.3g}); expected a tangent-space normal map encoded as n * 0.5 + 0.5",
                         where=where, key="normal")
    off = int((np.abs(length - 1.0) > UNIT_TOLERANCE).sum())
    return n / length[..., None], off


def renormalize_normals(image: np.ndarray, normal_channel: int) -> np.ndarray:
    """Unit-length normals in [0, 1] storage space (what the loss and engines see)."""
    if normal_channel < 0:
        return image
    out = image.copy()
    n = out[..., normal_channel:normal_channel + 3] * 2.0 - 1.0
    n /= np.sqrt((n * n).sum(-1, keepdims=True) + 1e-6)
    out[..., normal_channel:normal_channel + 3] = n * 0.5 + 0.5
    return out


@dataclass(frozen=True)
class Textures:
    """A material's textures by role, in storage space ([0, 1], colour still sRGB), all of
    one size, each with the channel count its role keeps; ``sources`` names where each
    came from (for messages), ``renormalised`` counts normal texels that were off unit."""

    maps: dict[str, np.ndarray]
    sources: dict[str, str]
    renormalised: int = 0

    def __getitem__(self, role: str) -> np.ndarray:
        return self.maps[role]

    def __contains__(self, role: str) -> bool:
        return role in self.maps

    def __iter__(self):
        return iter(self.maps)

    def source(self, role: str) -> str:
        return self.sources[role]

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) shared by every texture."""
        return next(iter(self.maps.values())).shape[:2]


def load_textures(files: Mapping[str, Path], roles: Sequence[str] | None = None) -> Textures:
    """The one material reader: each role's texture (of ``roles``, default every
    material-set role) from its file, checked. All must share one size: resampling would
    silently change what the artist authored, so a mismatch is an error naming both.
    Normals follow :func:`unit_normals`: texels off unit length are renormalised (and
    counted), texels without a direction refused."""
    roles = tuple(ROLES) if roles is None else tuple(roles)
    unknown = sorted(set(files) - set(ROLES))
    if unknown:
        raise UsageError(f"unknown texture role(s) {', '.join(unknown)} (known: {', '.join(ROLES)})", key="inputs")
    maps, sources, first, off = {}, {}, None, 0
    for role in ROLES:
        if role not in files or role not in roles:
            continue
        where = str(files[role])
        img = load_image(files[role], key=role)
        want = ROLES[role]
        if want == 1:
            img = img[..., :1]
        elif want == 3:
            if img.shape[2] < 3:
                raise UsageError(f"{role} needs 3 channels, the file has {img.shape[2]}", where=where, key=role)
            img = img[..., :3]
        if first is None:
            first = (role, img.shape[:2])
        elif img.shape[:2] != first[1]:
            raise UsageError(f"size {img.shape[1]}x{img.shape[0]} differs from {first[0]}'s "
                             f"{first[1][1]}x{first[1][0]}; textures of one material must share a size",
                             where=where, key=role)
        if role == "normal":
            img, off = _normal_policy(img, where)
        maps[role], sources[role] = img, where
    return Textures(maps, sources, off)


def _normal_policy(stored: np.ndarray, where: str) -> tuple[np.ndarray, int]:
    """Storage-space normals with only the off-unit texels renormalised (the others keep
    their authored bytes), and how many there were."""
    unit, off = unit_normals(stored, where=where)
    if not off:
        return stored, 0
    n = stored * 2.0 - 1.0
    wrong = np.abs(np.linalg.norm(n, axis=-1) - 1.0) > UNIT_TOLERANCE
    out = stored.copy()
    out[wrong] = unit[wrong] * 0.5 + 0.5
    return out, off


def load_material(files: Mapping[str, Path]) -> MaterialSet:
    """A material's textures (:func:`load_textures`) stacked as one multi-channel image
    in the table's role order."""
    if not files:
        raise UsageError("no textures in material", key="inputs")
    textures = load_textures(files)
    roles, slices, c = [], [], 0
    for role in textures:
        roles.append(role)
        slices.append((c, textures[role].shape[2]))
        c += textures[role].shape[2]
    if c > MAX_CHANNELS:
        raise UsageError(f"{c} channels in the set; at most {MAX_CHANNELS} fit one decoder", key="inputs")
    return MaterialSet(tuple(roles), tuple(slices), np.concatenate([textures[r] for r in roles], -1).astype(np.float32),
                       textures.renormalised)
