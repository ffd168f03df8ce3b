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

import numpy as np

from bakery.errors import UsageError, did_you_mean
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

    @property
    def channels(self) -> int:
        return self.image.shape[2]

    @property
    def normal_channel(self) -> int:
        return self.slices[self.roles.index("normal")][0] if "normal" in self.roles else -1

    def split(self, image: np.ndarray) -> dict[str, np.ndarray]:
        return {r: image[..., a:a + n] for r, (a, n) in zip(self.roles, self.slices)}


def renormalize_normals(image: np.ndarray, normal_channel: int) -> np.ndarray:
    """Unit-length normals in [0, 1] storage space (what the loss and engines see)."""
    if normal_channel < 0:
        return image
    out = image.copy()
    n = out[..., normal_channel:normal_channel + 3] * 2.0 - 1.0
    n /= np.sqrt((n * n).sum(-1, keepdims=True) + 1e-6)
    out[..., normal_channel:normal_channel + 3] = n * 0.5 + 0.5
    return out


def load_material(files: dict[str, Path]) -> MaterialSet:
    """Loads and stacks a material's textures. All must share one size: resampling would
    silently change what the artist authored, so a mismatch is an error naming both."""
    unknown = sorted(set(files) - set(ROLES))
    if unknown:
        hint = did_you_mean(unknown[0], ROLES) if len(unknown) == 1 else ""
        raise UsageError(f"unknown texture role(s) {', '.join(unknown)}{hint} (known: {', '.join(ROLES)})", key="inputs")
    if not files:
        raise UsageError("no textures in material", key="inputs")
    roles, slices, parts, first, c = [], [], [], None, 0
    for role in ROLES:
        if role not in files:
            continue
        img = load_image(files[role], key=role)
        want = ROLES[role]
        if want == 1:
            img = img[..., :1]
        elif want == 3:
            if img.shape[2] < 3:
                raise UsageError(f"{role} needs 3 channels, the file has {img.shape[2]}", where=str(files[role]), key=role)
            img = img[..., :3]
        if first is None:
            first = (role, img.shape[:2])
        elif img.shape[:2] != first[1]:
            raise UsageError(f"size {img.shape[1]}x{img.shape[0]} differs from {first[0]}'s "
                             f"{first[1][1]}x{first[1][0]}; textures of one material must share a size",
                             where=str(files[role]), key=role)
        roles.append(role)
        slices.append((c, img.shape[2]))
        parts.append(img)
        c += img.shape[2]
    if c > MAX_CHANNELS:
        raise UsageError(f"{c} channels in the set; at most {MAX_CHANNELS} fit one decoder", key="inputs")
    return MaterialSet(tuple(roles), tuple(slices), np.concatenate(parts, -1).astype(np.float32))
