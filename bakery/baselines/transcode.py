"""BCn blocks for a material's textures, ready for ``BundleWriter.write_texture``.

For engines without a neural decode path: the stage decodes its neural set to full-res
images and ships them as the classical formats of :mod:`bakery.baselines.material`.
Formats are named as :mod:`bakery.formats.texture` knows them; albedo is tagged sRGB
(``bc7_srgb``: same blocks, the sampler decodes sRGB) since it is authored in sRGB.
"""

from __future__ import annotations

import numpy as np

from bakery.baselines import bcn
from bakery.baselines.material import stored_channels, format_for
from bakery.materials import SRGB_ROLES


def texture_format(role: str, bc: str, *, srgb: bool | None = None) -> str:
    """bakery.formats.texture name for a BCn format of this role (sRGB only where BC1/BC7 can say it)."""
    srgb = role in SRGB_ROLES if srgb is None else srgb
    if srgb and bc in ("bc1", "bc7"):
        return f"{bc}_srgb"
    return f"{bc}_unorm"


def transcode_to_bcn(textures: dict[str, np.ndarray], *, formats: dict[str, str] | None = None,
                     profile: str = "basic") -> dict[str, tuple[str, bytes, int, int]]:
    """role -> (texture format name, blocks, width, height) for one mip level per texture.

    ``formats`` overrides the role's BCn choice (``{"albedo": "bc1"}``). Write each with
    ``writer.write_texture(f"{role}.dds", fmt, [blocks], width=w, height=h)``.
    """
    out = {}
    for role in sorted(textures):
        a = np.asarray(textures[role], dtype=np.float32)
        if a.ndim == 2:
            a = a[:, :, None]
        bc = (formats or {}).get(role) or format_for(role, a.shape[2])
        if bc == "bc1" and a.shape[2] == 4:
            a = a[:, :, :3]                       # BC1 here is opaque
        blocks = bcn.encode(stored_channels(role, a, bc), bc, profile=profile)
        out[role] = (texture_format(role, bc), blocks, a.shape[1], a.shape[0])
    return out
