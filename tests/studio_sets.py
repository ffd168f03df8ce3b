"""Small material sets laid out exactly as each studio convention names and packs them.

Every set holds the same generating values (:func:`reference_maps`, on the 8-bit grid so
packing, DirectX flips and smoothness are exact), so a test can check that each role
lands in the right channel, whatever the layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from bakery.formats.images import encode_png
from bakery.imaging import to_uint8


def reference_maps(h: int = 32, w: int = 32) -> dict[str, np.ndarray]:
    """role -> storage-space values ([H, W, C] float32 on the 8-bit grid)."""
    y, x = np.mgrid[0:h, 0:w] / np.float32(max(h, w))
    q = lambda a: to_uint8(a).astype(np.float32) / 255.0  # noqa: E731
    n = np.stack([0.35 * np.sin(9 * x) * np.cos(5 * y), 0.3 * np.cos(7 * y + 1.0), np.ones_like(x)], -1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    return {
        "albedo": q(np.stack([0.2 + 0.6 * x, 0.7 - 0.4 * y, 0.3 + 0.3 * np.sin(6 * x * y)], -1)),
        "normal": q(n * 0.5 + 0.5),
        "roughness": q((0.25 + 0.6 * y * (0.5 + 0.5 * np.cos(8 * x)))[..., None]),
        "metalness": q(((x + 0.3 * y) > 0.6).astype(np.float32)[..., None]),
        "ao": q((0.55 + 0.45 * np.cos(5 * x) * np.cos(4 * y) ** 2)[..., None]),
        "height": q((0.5 + 0.4 * np.sin(4 * x + 3 * y))[..., None]),
        "opacity": q((0.3 + 0.7 * (x < 0.8))[..., None]),
    }


def _png(path: Path, image: np.ndarray) -> None:
    path.write_bytes(encode_png(image))


def _dx(normal: np.ndarray) -> np.ndarray:
    out = normal.copy()
    out[..., 1] = (255 - np.rint(out[..., 1] * 255)) / 255  # green flipped on the 8-bit grid
    return out


def _pack(*channels: np.ndarray) -> np.ndarray:
    return np.concatenate(channels, -1)


def write_set(folder: Path, convention: str, maps: dict[str, np.ndarray]) -> Path:
    """``maps`` written as ``convention`` names and packs them; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    m = maps
    if convention == "ambientcg":   # both normal conventions, as ambientCG ships them
        p = folder / "Rock042_1K-PNG_"
        _png(Path(f"{p}Color.png"), m["albedo"])
        _png(Path(f"{p}NormalGL.png"), m["normal"])
        _png(Path(f"{p}NormalDX.png"), _dx(m["normal"]))
        _png(Path(f"{p}Roughness.png"), m["roughness"])
        _png(Path(f"{p}Metalness.png"), m["metalness"])
        _png(Path(f"{p}AmbientOcclusion.png"), m["ao"])
        _png(Path(f"{p}Displacement.png"), m["height"])
        _png(Path(f"{p}Opacity.png"), m["opacity"])
        _png(folder / "Rock042.png", m["albedo"][::2, ::2])            # the preview: no role
    elif convention == "polyhaven":  # DirectX normal, ARM packing, resolution tags, TGA/EXR
        Image.fromarray(to_uint8(m["albedo"])).save(folder / "rock_wall_diff_1k.tga")
        _png(folder / "rock_wall_nor_dx_1k.png", _dx(m["normal"]))
        _png(folder / "rock_wall_arm_1k.png", _pack(m["ao"], m["roughness"], m["metalness"]))
        import OpenEXR

        OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                     {"Y": m["height"][..., 0].astype(np.float32)}).write(str(folder / "rock_wall_disp_1k.exr"))
    elif convention == "substance":  # 16-bit height, TIFF ambient occlusion
        _png(folder / "Crate_BaseColor.png", m["albedo"])
        _png(folder / "Crate_Normal.png", m["normal"])
        _png(folder / "Crate_Roughness.png", m["roughness"])
        _png(folder / "Crate_Metallic.png", m["metalness"])
        Image.fromarray(to_uint8(m["ao"][..., 0])).save(folder / "Crate_Mixed_AO.tif")
        h16 = np.rint(m["height"][..., 0] * 65535).astype(np.uint16)
        Image.fromarray(h16).save(folder / "Crate_Height.png")
    elif convention == "gltf":       # opacity in the base colour's alpha
        _png(folder / "Helmet_baseColor.png", _pack(m["albedo"], m["opacity"]))
        _png(folder / "Helmet_normal.png", m["normal"])
        _png(folder / "Helmet_occlusionRoughnessMetallic.png", _pack(m["ao"], m["roughness"], m["metalness"]))
    elif convention == "unreal":     # DirectX normal, ORM
        _png(folder / "T_Barrel_D.png", m["albedo"])
        _png(folder / "T_Barrel_N.png", _dx(m["normal"]))
        _png(folder / "T_Barrel_ORM.png", _pack(m["ao"], m["roughness"], m["metalness"]))
    elif convention == "unity-hdrp":  # mask map: R metal, G AO, B detail mask, A smoothness
        _png(folder / "Pipe_BaseColorMap.png", m["albedo"])
        _png(folder / "Pipe_NormalMap.png", m["normal"])
        smooth = (255 - np.rint(m["roughness"] * 255)) / 255
        _png(folder / "Pipe_MaskMap.png", _pack(m["metalness"], m["ao"], np.ones_like(m["ao"]), smooth))
    elif convention == "separate":
        for role in ("albedo", "normal", "roughness", "metalness", "ao", "height"):
            if role in m:
                _png(folder / f"{role}.png", m[role])
    else:
        raise ValueError(convention)
    return folder


#: Roles each convention's set carries (what a check may expect back).
ROLES_OF = {
    "ambientcg": ("albedo", "normal", "roughness", "metalness", "ao", "height", "opacity"),
    "polyhaven": ("albedo", "normal", "roughness", "metalness", "ao", "height"),
    "substance": ("albedo", "normal", "roughness", "metalness", "ao", "height"),
    "gltf": ("albedo", "normal", "roughness", "metalness", "ao", "opacity"),
    "unreal": ("albedo", "normal", "roughness", "metalness", "ao"),
    "unity-hdrp": ("albedo", "normal", "roughness", "metalness", "ao"),
    "separate": ("albedo", "normal", "roughness", "metalness", "ao", "height"),
}
CONVENTIONS = tuple(ROLES_OF)
