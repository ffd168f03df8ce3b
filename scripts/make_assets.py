#!/usr/bin/env python3
"""Generates the sample assets in ``assets/`` (deterministic; rerun to reproduce them).

No PBR texture sets are installable here, so we synthesise photo-like ones: detail from
multi-octave noise with a natural-image 1/f spectrum, structure from brick, tile and
cobblestone patterns. Every map is derived from one height field (normal from its
gradient, AO from its cavities), so the set is physically consistent and tileable
(all noise is made in the Fourier domain and all patterns wrap).

    python3 scripts/make_assets.py [--out assets] [--size 256]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.tileable_noise import blur, fractal_noise  # noqa: E402

SEED = 20240601


def normal_from_height(h: np.ndarray, strength: float) -> np.ndarray:
    """Tangent-space normal map (OpenGL convention, +Y up) encoded to [0, 1]."""
    dx = (np.roll(h, -1, 1) - np.roll(h, 1, 1)) * 0.5 * strength
    dy = (np.roll(h, -1, 0) - np.roll(h, 1, 0)) * 0.5 * strength
    n = np.stack([-dx, dy, np.ones_like(h)], axis=-1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    return n * 0.5 + 0.5


def ambient_occlusion(h: np.ndarray, strength: float) -> np.ndarray:
    """Cavities (points below their blurred surroundings) are darker."""
    cavity = np.zeros_like(h)
    for sigma, w in ((2.0, 0.5), (6.0, 0.35), (14.0, 0.15)):
        cavity += w * np.maximum(blur(h, sigma) - h, 0.0)
    return np.clip(1.0 - strength * cavity, 0.0, 1.0)


def _cells(n: int, rows: int, cols: int, offset_odd_rows: float):
    """Row/column cell ids and in-cell coordinates in [0,1) for brick-like layouts."""
    y, x = np.mgrid[0:n, 0:n].astype(np.float32) / n
    row = np.floor(y * rows)
    xs = x * cols + offset_odd_rows * (row % 2)
    col = np.floor(xs) % cols
    return row, col, (y * rows) % 1.0, xs % 1.0


def _groove(u: np.ndarray, v: np.ndarray, width_u: float, width_v: float) -> np.ndarray:
    """1 inside a cell, falling smoothly to 0 at its mortar joints."""
    du = np.minimum(u, 1 - u) / width_u
    dv = np.minimum(v, 1 - v) / width_v
    return np.clip(np.minimum(du, dv), 0.0, 1.0) ** 0.7


def _per_cell(rng, ids: np.ndarray, count: int, lo=0.0, hi=1.0):
    table = rng.uniform(lo, hi, size=count)
    return table[ids.astype(np.int64) % count]


def bricks(rng, n):
    row, col, v, u = _cells(n, rows=8, cols=4, offset_odd_rows=0.5)
    ids = row * 4 + col
    inside = _groove(u, v, 0.04, 0.08)
    detail = fractal_noise(rng, n, 2.2)[:, :, 0]
    height = 0.35 + 0.45 * inside + 0.2 * (detail - 0.5) * inside + 0.05 * _per_cell(rng, ids, 32)
    tint = _per_cell(rng, ids, 32, 0.75, 1.15)[..., None]
    brick = np.array([0.55, 0.24, 0.16], np.float32) * tint
    mortar = np.array([0.62, 0.6, 0.55], np.float32)
    stain = tinted_noise(rng, n, 1.8)
    albedo = inside[..., None] * brick + (1 - inside[..., None]) * mortar
    albedo = albedo * (0.75 + 0.5 * stain)
    rough = 0.7 + 0.25 * (1 - inside) + 0.1 * (detail - 0.5)
    metal = np.zeros_like(height)
    return height, albedo, rough, metal, 18.0


def tiles(rng, n):
    row, col, v, u = _cells(n, rows=4, cols=4, offset_odd_rows=0.0)
    ids = row * 4 + col
    inside = _groove(u, v, 0.06, 0.06)
    detail = fractal_noise(rng, n, 2.6)[:, :, 0]
    height = 0.3 + 0.6 * inside + 0.04 * (detail - 0.5)
    is_metal = (_per_cell(rng, ids, 16) > 0.75).astype(np.float32)
    glaze = np.stack([_per_cell(rng, ids, 16, 0.2, 0.5), _per_cell(rng, ids + 5, 16, 0.35, 0.6),
                      _per_cell(rng, ids + 9, 16, 0.45, 0.75)], axis=-1)
    gold = np.array([0.83, 0.69, 0.32], np.float32)
    tile_col = is_metal[..., None] * gold + (1 - is_metal[..., None]) * glaze
    grout = np.array([0.2, 0.19, 0.18], np.float32)
    speck = tinted_noise(rng, n, 1.2)
    albedo = inside[..., None] * tile_col + (1 - inside[..., None]) * grout
    albedo = np.clip(albedo * (0.85 + 0.3 * speck), 0, 1)
    rough = np.where(is_metal > 0, 0.25, 0.15) * inside + 0.85 * (1 - inside) + 0.08 * (detail - 0.5)
    metal = is_metal * (inside > 0.5)
    return height, albedo, rough, metal, 10.0


def cobblestones(rng, n, count=28):
    """Periodic Voronoi cells, each a rounded stone."""
    pts = rng.uniform(0, 1, size=(count, 2)).astype(np.float32)
    y, x = np.mgrid[0:n, 0:n].astype(np.float32) / n
    d = np.full((2, n, n), np.inf, np.float32)
    nearest = np.zeros((n, n), np.int64)
    for i, (py, px) in enumerate(pts):
        dy = np.abs(y - py)
        dx = np.abs(x - px)
        dist = np.sqrt(np.minimum(dy, 1 - dy) ** 2 + np.minimum(dx, 1 - dx) ** 2)
        closer = dist < d[0]
        d[1] = np.where(closer, d[0], np.minimum(d[1], dist))
        d[0] = np.where(closer, dist, d[0])
        nearest = np.where(closer, i, nearest)
    edge = np.clip((d[1] - d[0]) * n / 10.0, 0, 1)  # 0 on the cell border
    dome = np.sqrt(edge)
    detail = fractal_noise(rng, n, 2.0)[:, :, 0]
    height = 0.25 + 0.6 * dome + 0.15 * (detail - 0.5)
    tint = rng.uniform(0.6, 1.2, size=count)[nearest][..., None]
    stone = np.array([0.5, 0.48, 0.44], np.float32) * tint
    dirt = np.array([0.28, 0.22, 0.16], np.float32)
    grain = tinted_noise(rng, n, 1.6)
    albedo = dome[..., None] * stone + (1 - dome[..., None]) * dirt
    albedo = np.clip(albedo * (0.7 + 0.6 * grain), 0, 1)
    rough = 0.55 + 0.35 * (1 - dome) + 0.15 * (detail - 0.5)
    metal = np.zeros_like(height)
    return height, albedo, rough, metal, 14.0


def rust(rng, n):
    base = tinted_noise(rng, n, 2.0, 0.3)
    spots = blur(fractal_noise(rng, n, 1.5)[:, :, 0], 1.5)
    m = np.clip((spots - 0.5) * 6 + 0.5, 0, 1)[..., None]
    steel = np.array([0.45, 0.47, 0.5], np.float32) * (0.8 + 0.4 * base)
    oxide = np.array([0.55, 0.25, 0.1], np.float32) * (0.6 + 0.8 * base)
    return np.clip(m * oxide + (1 - m) * steel, 0, 1)


def wood(rng, n):
    y, x = np.mgrid[0:n, 0:n].astype(np.float32) / n
    warp = blur(fractal_noise(rng, n, 2.4)[:, :, 0], 6.0)
    warp = (warp - warp.mean()) / (warp.std() + 1e-8)
    rings = 0.5 + 0.5 * np.sin(2 * np.pi * (8 * x + 0.35 * warp + 0.3 * np.sin(2 * np.pi * y)))
    fibres = fractal_noise(rng, n, 1.6)[:, :, 0]
    grain = blur(fibres, 0.5)
    t = (0.85 * rings ** 2 + 0.15 * grain)[..., None]
    light = np.array([0.78, 0.56, 0.33], np.float32)
    dark = np.array([0.42, 0.24, 0.1], np.float32)
    return np.clip(light * (1 - t) + dark * t, 0, 1)


def tinted_noise(rng, n, beta, tint=0.15):
    """Mostly-luminance noise with a little colour, like real surface grime."""
    lum = fractal_noise(rng, n, beta)
    col = fractal_noise(rng, n, beta, 3)
    return (1 - tint) * lum + tint * col


def _png(img: np.ndarray, bits: int = 8) -> bytes:
    img = np.clip(img, 0.0, 1.0)
    if bits == 16:
        a = (img * 65535.0 + 0.5).astype(np.uint16)
        im = Image.fromarray(a[:, :, 0] if a.ndim == 3 else a)
    else:
        a = (img * 255.0 + 0.5).astype(np.uint8)
        im = Image.fromarray(a[:, :, 0] if a.ndim == 3 and a.shape[2] == 1 else a)
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=9)
    return buf.getvalue()


#: The materials this script makes, by name: each a function of (rng, size).
MATERIALS = {"bricks": bricks, "tiles": tiles, "cobblestones": cobblestones}


def material_maps(height, albedo, rough, metal, normal_strength) -> dict[str, tuple[np.ndarray, int]]:
    """role -> (image, bits) of one material: normal and AO derived from its height."""
    h = np.clip(height, 0, 1).astype(np.float32)
    return {
        "albedo": (albedo, 8),
        "normal": (normal_from_height(h * h.shape[0] / 64.0, normal_strength / 4.0), 8),
        "roughness": (rough, 8),
        "metalness": (metal, 8),
        "ao": (ambient_occlusion(h, 4.0), 8),
        "height": (h, 16),
    }


def write_material(folder: Path, height, albedo, rough, metal, normal_strength) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for role, (img, bits) in material_maps(height, albedo, rough, metal, normal_strength).items():
        (folder / f"{role}.png").write_bytes(_png(np.asarray(img, np.float32), bits))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "assets")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=SEED, help="other seeds make other materials the same way")
    args = ap.parse_args()
    n = args.size
    for i, (name, make) in enumerate(MATERIALS.items()):
        write_material(args.out / "materials" / name, *make(np.random.default_rng(args.seed + i), n))
    tex = args.out / "textures"
    tex.mkdir(parents=True, exist_ok=True)
    (tex / "rust.png").write_bytes(_png(rust(np.random.default_rng(args.seed + 10), n)))
    (tex / "wood.png").write_bytes(_png(wood(np.random.default_rng(args.seed + 11), n)))
    from scripts.make_fit_assets import make as make_fit_examples

    make_fit_examples(args.out / "fit", 128)
    print(f"wrote sample assets to {args.out}")


if __name__ == "__main__":
    main()
