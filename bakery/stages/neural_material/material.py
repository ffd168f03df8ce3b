"""The material folder as per-texel shading parameters, and their filtered mip chain.

A texel is 8 floats, the encoder's input and the teacher's arguments: linear albedo
(sRGB-decoded), unit tangent-space normal, perceptual roughness, metalness. Only albedo
is required; a missing normal is flat, roughness and metalness take the stage's
defaults. Other roles of the folder (ao, height, ...) are accepted and not used.
"""

from __future__ import annotations

import numpy as np

from bakery.errors import UsageError
from bakery.materials import load_material

PARAMS = 8  # albedo rgb, normal xyz, roughness, metalness


def srgb_to_linear(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 0.0, 1.0)
    return np.where(c <= 0.0031308, 12.92 * c, 1.055 * c ** (1 / 2.4) - 0.055)


def material_params(files: dict, *, roughness: float = 0.5, metalness: float = 0.0) -> np.ndarray:
    """[H, W, 8] float32 shading parameters from a material folder's role -> file map."""
    if "albedo" not in files:
        raise UsageError(f"the material has no albedo texture (roles found: {', '.join(sorted(files)) or 'none'})",
                         key="albedo")
    mat = load_material(dict(files))
    tex = mat.split(mat.image)
    albedo = tex["albedo"]
    if albedo.shape[2] < 3:
        albedo = np.repeat(albedo[..., :1], 3, axis=2)
    h, w = albedo.shape[:2]
    if "normal" in tex:
        n = tex["normal"] * 2.0 - 1.0
        length = np.linalg.norm(n, axis=-1, keepdims=True)
        if np.any(length < 1e-3):
            raise UsageError("normal map has zero-length texels; expected tangent-space normals in [0, 1] storage",
                             where=str(files["normal"]), key="normal")
        n = n / length
    else:
        n = np.broadcast_to(np.array([0.0, 0.0, 1.0], np.float32), (h, w, 3))
    r = tex["roughness"] if "roughness" in tex else np.full((h, w, 1), roughness, np.float32)
    m = tex["metalness"] if "metalness" in tex else np.full((h, w, 1), metalness, np.float32)
    out = np.concatenate([srgb_to_linear(albedo[..., :3]), n, r, m], axis=-1)
    return np.ascontiguousarray(out, dtype=np.float32)


def downsample(params: np.ndarray) -> np.ndarray:
    """One mip level down (2x2 box, max(1, size // 2) as GPU mips are). Roughness is averaged as alpha =
    r^2 and widened by the normals' spread (Toksvig): a bumpy texel seen from afar looks
    rougher, which is what the teacher's filtered appearance needs."""
    h, w, _ = params.shape
    ys = np.minimum(np.arange(max(1, h // 2))[:, None] * 2 + np.array([0, 1]), h - 1)
    xs = np.minimum(np.arange(max(1, w // 2))[:, None] * 2 + np.array([0, 1]), w - 1)
    block = params[ys[:, :, None, None], xs[None, None, :, :]]       # [h2, 2, w2, 2, 8]
    mean = block.mean(axis=(1, 3))
    alpha2 = (block[..., 6] ** 4).mean(axis=(1, 3))
    n = mean[..., 3:6]
    length = np.maximum(np.linalg.norm(n, axis=-1), 1e-4)
    spread = (1.0 - np.minimum(length, 1.0)) / length
    out = mean.copy()
    out[..., 3:6] = n / length[..., None]
    out[..., 6] = np.clip((alpha2 + spread) ** 0.25, 0.0, 1.0)
    return out.astype(np.float32)


def mip_chain(params: np.ndarray) -> list[np.ndarray]:
    """Level 0 down to 1x1."""
    levels = [params]
    while levels[-1].shape[0] > 1 or levels[-1].shape[1] > 1:
        levels.append(downsample(levels[-1]))
    return levels
