"""CPU reference decoder of an NTC bundle (numpy only): the same arithmetic as
bakery/stages/ntc/ntc_fit.slang and the generated per-texel shaders, used to check both,
by ``bakery decompress`` and by import tools that want pixels without a GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bakery.nn.network import NetworkSpec
from bakery.stages.ntc.texture_set import LOD_INPUT_SCALE, LatentGridSpec, texel_position_encoding


def sample_level(values: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Bilinear (clamp to edge) samples of one latent level [gh, gw, F] of values in [0, 1]."""
    gh, gw, _ = values.shape
    vals = values.astype(np.float32)
    gx, gy = u * gw - 0.5, v * gh - 0.5
    fx, fy = np.floor(gx), np.floor(gy)
    tx, ty = (gx - fx)[:, None], (gy - fy)[:, None]
    x0, x1 = np.clip(fx, 0, gw - 1).astype(int), np.clip(fx + 1, 0, gw - 1).astype(int)
    y0, y1 = np.clip(fy, 0, gh - 1).astype(int), np.clip(fy + 1, 0, gh - 1).astype(int)
    return ((1 - tx) * (1 - ty) * vals[y0, x0] + tx * (1 - ty) * vals[y0, x1]
            + (1 - tx) * ty * vals[y1, x0] + tx * ty * vals[y1, x1])


def network_inputs(grid: LatentGridSpec, levels: list[np.ndarray], px, py, mip: int = 0) -> np.ndarray:
    """The decoder's input rows (layout in docs/FORMAT.md) for texels (px, py) of colour mip ``mip``."""
    w, h = grid.color_mips[mip]
    a = grid.latent_pair(mip)
    u = ((px + 0.5) / w).astype(np.float32)
    v = ((py + 0.5) / h).astype(np.float32)
    lod = np.full((len(px), 1), mip * LOD_INPUT_SCALE, np.float32)
    return np.concatenate([sample_level(levels[a], u, v), sample_level(levels[a + 1], u, v),
                           texel_position_encoding(px, py, grid.pe_octaves), lod], -1)


def decode_texels(grid, levels, spec: NetworkSpec, params, px, py, mip: int = 0) -> np.ndarray:
    """Raw decoder outputs [N, C] for texels (px, py) of colour mip ``mip``."""
    return spec.forward(params, network_inputs(grid, levels, np.asarray(px), np.asarray(py), mip))


def decode_image(grid: LatentGridSpec, levels: list[np.ndarray], spec: NetworkSpec, params, mip: int = 0) -> np.ndarray:
    w, h = grid.color_mips[mip]
    py, px = np.mgrid[0:h, 0:w]
    out = decode_texels(grid, levels, spec, params, px.reshape(-1), py.reshape(-1), mip)
    return out.reshape(h, w, -1).astype(np.float32)


def latent_values(bundle) -> tuple[LatentGridSpec, list[np.ndarray]]:
    """The latent levels as the GPU sees them (values in [0, 1]) of a bundle the reader
    verified (:func:`bakery.formats.reader.read_bundle`), decoded from its GPU-resident
    latent file (packed ``latents.bin`` or BC4 ``latents.dds``) as already read and
    hashed: nothing is read from disk again, so no name can reach outside the bundle."""
    from bakery.formats.errors import BundleError
    from bakery.stages.ntc.packing import unpack

    record = bundle.ntc
    if record is None:
        raise BundleError("not an ntc bundle (no 'ntc' object)", where=str(bundle.path / "manifest.json"))
    grid, name = record.grid, record.latents_file
    where = str(bundle.path / name)
    if grid.mode == "packed":
        top = float((1 << grid.bits) - 1)
        try:
            codes = unpack(grid, bundle.files[name])
        except ValueError as e:
            raise BundleError(str(e), where=where) from None
        return grid, [c.astype(np.float32) / top for c in codes]
    from bakery.stages.ntc.bc4 import decode_plane

    tex = bundle.textures.get(name)
    if tex is None or tex.format.name != "bc4_unorm" or tex.layer_count != grid.features \
            or tex.level_count < len(grid.levels) or (tex.width, tex.height) != grid.levels[0][:2]:
        raise BundleError(f"is not a BC4 array of {grid.features} layers and {len(grid.levels)} levels of "
                          f"{grid.levels[0][0]}x{grid.levels[0][1]} (the manifest's latent grid)", where=where)
    levels = []
    for k, (w, h, f) in enumerate(grid.levels):
        planes = [decode_plane(tex.levels[k][i], w, h) for i in range(f)]
        levels.append(np.stack(planes, -1).astype(np.float32))
    return grid, levels
