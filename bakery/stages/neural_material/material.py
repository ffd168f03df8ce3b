"""The neural_material stage's shading inputs: a material folder (read by
:func:`bakery.materials.load_textures`) as per-texel shading parameters, and their
filtered mip chain.

A texel is 8 floats, the encoder's input and the teacher's arguments: linear albedo
(sRGB-decoded), unit tangent-space normal, perceptual roughness, metalness. Only albedo
is required; a missing normal is flat, roughness and metalness take the stage's
defaults. Other roles of the folder (ao, height, ...) are accepted and not used.
"""

from __future__ import annotations

import numpy as np

from bakery.errors import UsageError
from bakery.imaging import mip_size, srgb_to_linear
from bakery.materials import load_textures, unit_normals

PARAMS = 8  # albedo rgb, normal xyz, roughness, metalness


def material_params(files: dict, *, roughness: float = 0.5,
                    metalness: float = 0.0) -> tuple[np.ndarray, tuple[str, ...]]:
    """([H, W, 8] float32 shading parameters, the loader's notes for the task log) from a
    material folder's role -> file map."""
    tex = load_textures(files, roles=("albedo", "normal", "roughness", "metalness"))
    if "albedo" not in tex:
        raise UsageError(f"the material has no albedo texture (roles found: {', '.join(sorted(files)) or 'none'})",
                         key="albedo")
    albedo = tex["albedo"]
    if albedo.shape[2] < 3:
        albedo = np.repeat(albedo[..., :1], 3, axis=2)
    h, w = tex.shape
    if "normal" in tex:
        n, _ = unit_normals(tex["normal"], where=tex.source("normal"))
    else:
        n = np.broadcast_to(np.array([0.0, 0.0, 1.0], np.float32), (h, w, 3))
    r = tex["roughness"] if "roughness" in tex else np.full((h, w, 1), roughness, np.float32)
    m = tex["metalness"] if "metalness" in tex else np.full((h, w, 1), metalness, np.float32)
    out = np.concatenate([srgb_to_linear(albedo[..., :3]), n, r, m], axis=-1)
    return np.ascontiguousarray(out, dtype=np.float32), tex.notes


def downsample(params: np.ndarray) -> np.ndarray:
    """One mip level down (2x2 box, :func:`bakery.imaging.mip_size` as GPU mips are). Roughness is averaged as alpha =
    r^2 and widened by the normals' spread (Toksvig): a bumpy texel seen from afar looks
    rougher, which is what the teacher's filtered appearance needs."""
    h, w, _ = params.shape
    ys = np.minimum(np.arange(mip_size(h, 1))[:, None] * 2 + np.array([0, 1]), h - 1)
    xs = np.minimum(np.arange(mip_size(w, 1))[:, None] * 2 + np.array([0, 1]), w - 1)
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
