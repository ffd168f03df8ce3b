"""Engine texture layouts: a material's role maps packed the way an engine imports them.

``separate`` writes one texture per role. ``gltf`` follows the glTF 2.0 material model
(``baseColor`` RGB + opacity in A, ``normal`` OpenGL, ``occlusionRoughnessMetallic`` R
AO, G roughness, B metalness); ``unreal`` Unreal Engine's naming (``D`` RGB + A, ``N``
DirectX, ``ORM``); ``unity-hdrp`` the HDRP Lit shader's maps (``BaseColorMap``,
``NormalMap`` OpenGL, ``MaskMap`` R metallic, G AO, B detail mask, A smoothness =
1 - roughness). A role a layout does not pack (height, specular, ...) is written on its
own. Outputs read back through :mod:`bakery.naming` as the same roles, so a decompressed
set can be baked again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from bakery.materials import complement

LAYOUTS = ("separate", "gltf", "unreal", "unity-hdrp")
#: The normal convention each layout's engine reads (bakery.materials.NORMAL_CONVENTIONS).
NORMAL_CONVENTION = {"separate": "gl", "gltf": "gl", "unreal": "dx", "unity-hdrp": "gl"}
#: What an absent role stands at in a packed texture: no occlusion, fully rough (glTF's
#: default factor), not metal, detail everywhere (HDRP's white mask), opaque.
DEFAULTS = {"ao": 1.0, "roughness": 1.0, "metalness": 0.0, "detail_mask": 1.0, "opacity": 1.0}


@dataclass(frozen=True)
class Packed:
    """One texture of a layout: its name, (role, inverted) per channel, and ``kind``: the
    role whose storage it takes (``albedo``: sRGB colour, ``normal``: a normal map), or
    None for a packed map of linear values."""

    name: str
    channels: tuple[tuple[str, bool], ...]
    kind: str | None = None


def _colour(name: str) -> Packed:
    return Packed(name, (("albedo", False), ("albedo", False), ("albedo", False), ("opacity", False)), "albedo")


_ORM = (("ao", False), ("roughness", False), ("metalness", False))
TABLE: dict[str, tuple[Packed, ...]] = {
    "gltf": (_colour("baseColor"), Packed("normal", (), "normal"), Packed("occlusionRoughnessMetallic", _ORM),
             Packed("emissive", (), "emissive")),
    "unreal": (_colour("D"), Packed("N", (), "normal"), Packed("ORM", _ORM), Packed("E", (), "emissive")),
    "unity-hdrp": (_colour("BaseColorMap"), Packed("NormalMap", (), "normal"),
                   Packed("MaskMap", (("metalness", False), ("ao", False), ("detail_mask", False),
                                      ("roughness", True))),
                   Packed("EmissiveMap", (), "emissive")),
}


def pack(textures: Mapping[str, np.ndarray], layout: str, *,
         normal_convention: str | None = None) -> dict[str, tuple[np.ndarray, str | None]]:
    """name -> (storage-space image, kind) of ``textures`` (role -> [H, W, C] in [0, 1],
    normals OpenGL) in ``layout``; normals written in ``normal_convention`` (default:
    the layout engine's). A packed texture none of whose roles is present is left out;
    the base colour has an alpha only where the set has an opacity."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    convention = normal_convention or NORMAL_CONVENTION[layout]
    out: dict[str, tuple[np.ndarray, str | None]] = {}
    used: set[str] = set()
    for t in TABLE.get(layout, ()):
        if not t.channels:                          # a whole role under the engine's name
            role = t.kind
            if role in textures:
                image = textures[role]
                out[t.name] = (_normal_out(image, convention) if role == "normal" else image, role)
                used.add(role)
            continue
        roles = {r for r, _ in t.channels}
        if not roles & set(textures) or (t.kind == "albedo" and "albedo" not in textures):
            continue
        channels = []
        for i, (role, inverted) in enumerate(t.channels):
            if role == "opacity" and t.kind == "albedo" and "opacity" not in textures:
                continue                            # an opaque base colour stays RGB
            src = textures.get(role)
            if src is None:
                plane = np.full(next(iter(textures.values())).shape[:2], DEFAULTS[role], np.float32)
            else:
                plane = src[..., min(i, src.shape[2] - 1) if role == "albedo" else 0]
            channels.append(complement(plane) if inverted else plane.astype(np.float32))
            used.add(role)
        out[t.name] = (np.stack(channels, -1), t.kind)
    for role, image in textures.items():            # what the layout does not pack, on its own
        if role not in used:
            out[role] = (_normal_out(image, convention) if role == "normal" else image, role)
    return out


def _normal_out(stored: np.ndarray, convention: str) -> np.ndarray:
    """An OpenGL storage-space normal map in ``convention`` (DirectX: green flipped)."""
    if convention == "gl":
        return stored
    out = np.array(stored, np.float32)
    out[..., 1] = complement(out[..., 1])
    return out
