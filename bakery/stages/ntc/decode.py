"""CPU reference decoder of an NTC bundle (numpy only): the same arithmetic as
bakery/stages/ntc/ntc_fit.slang and the generated per-texel shader, used to check both
and by import tools that want pixels without a GPU."""

from __future__ import annotations

import numpy as np

from bakery.stages.ntc.objective import LatentGridSpec, texel_position_encoding
from bakery.nn.network import NetworkSpec


def sample_level(codes: np.ndarray, bits: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Bilinear (clamp to edge) samples of one latent level [gh, gw, F] of integer codes."""
    gh, gw, _ = codes.shape
    vals = codes.astype(np.float32) / np.float32((1 << bits) - 1)
    gx, gy = u * gw - 0.5, v * gh - 0.5
    fx, fy = np.floor(gx), np.floor(gy)
    tx, ty = (gx - fx)[:, None], (gy - fy)[:, None]
    x0, x1 = np.clip(fx, 0, gw - 1).astype(int), np.clip(fx + 1, 0, gw - 1).astype(int)
    y0, y1 = np.clip(fy, 0, gh - 1).astype(int), np.clip(fy + 1, 0, gh - 1).astype(int)
    return ((1 - tx) * (1 - ty) * vals[y0, x0] + tx * (1 - ty) * vals[y0, x1]
            + (1 - tx) * ty * vals[y1, x0] + tx * ty * vals[y1, x1])


def network_inputs(grid: LatentGridSpec, levels: list[np.ndarray], px: np.ndarray, py: np.ndarray) -> np.ndarray:
    u = ((px + 0.5) / grid.width).astype(np.float32)
    v = ((py + 0.5) / grid.height).astype(np.float32)
    feats = [sample_level(c, grid.bits, u, v) for c in levels]
    return np.concatenate(feats + [texel_position_encoding(px, py, grid.pe_octaves)], -1)


def decode_texels(grid: LatentGridSpec, levels: list[np.ndarray], spec: NetworkSpec, params: np.ndarray,
                  px: np.ndarray, py: np.ndarray) -> np.ndarray:
    """Raw decoder outputs [N, C] for texels (px, py)."""
    return spec.forward(params, network_inputs(grid, levels, np.asarray(px), np.asarray(py)))


def decode_image(grid: LatentGridSpec, levels: list[np.ndarray], spec: NetworkSpec, params: np.ndarray) -> np.ndarray:
    py, px = np.mgrid[0:grid.height, 0:grid.width]
    out = decode_texels(grid, levels, spec, params, px.reshape(-1), py.reshape(-1))
    return out.reshape(grid.height, grid.width, -1).astype(np.float32)
