#!/usr/bin/env python3
"""Generates the fit stage's example images in ``assets/fit/`` (deterministic, numpy only;
scripts/make_assets.py calls it). The specs and shaders there are hand-written and are
copied when writing elsewhere.

(a) brightness: a photo-like source texture and the reference ``source + amount`` with
    amount = (51, -34, 17) / 255, computed in 8-bit integers so the PNG holds it exactly.
(b) rainbow: a grayscale truth mask (soft blobs and a ring) and the reference that
    rainbow.slang renders from it, through a float64 port of the shader (the same on
    every machine; tests/test_fit.py checks it against the Slang render).

    python3 scripts/make_fit_assets.py [--out assets/fit] [--size 128]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.tileable_noise import fractal_noise  # noqa: E402

REPO_FIT = Path(__file__).resolve().parent.parent / "assets" / "fit"
#: The hand-written files of the examples.
SOURCES = ("brightness.slang", "brightness.toml", "rainbow.slang", "rainbow.toml")
SEED = 20261202
#: The brightness example's truth, in 8-bit steps (so the 8-bit reference is exact).
AMOUNT_STEPS = (51, -34, 17)
AMOUNT = tuple(k / 255.0 for k in AMOUNT_STEPS)


def truth_mask(n: int, seed: int = SEED) -> np.ndarray:
    """A grayscale mask in [0, 1]: soft blobs, a ring and fine noise, [n, n, 1]."""
    rng = np.random.default_rng(seed)
    y, x = (np.mgrid[0:n, 0:n] + 0.5) / n
    m = np.zeros((n, n), np.float64)
    for _ in range(7):
        cx, cy, r, a = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9), rng.uniform(0.06, 0.2), rng.uniform(-0.6, 0.9)
        m += a * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
    ring = np.abs(np.hypot(x - 0.5, y - 0.5) - 0.3)
    m += 0.8 * np.clip(1.0 - ring / 0.03, 0.0, 1.0)
    m += 0.25 * (fractal_noise(rng, n)[:, :, 0] - 0.5)
    m = (m - m.min()) / (m.max() - m.min())
    return m[:, :, None].astype(np.float32)


def save_png(path: Path, image: np.ndarray) -> None:
    a = (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a).save(path, compress_level=6)


def render_spec(spec_path: Path, values: dict[str, np.ndarray], device_kind: str = "auto") -> np.ndarray:
    """What the spec's function renders with its trainable arguments set to ``values``."""
    from bakery.device import open_device
    from bakery.formats.images import load_image
    from bakery.nn.trainer import TrainConfig, Trainer
    from bakery.stages.fit.objective import ShaderFit
    from bakery.stages.fit.signature import reflect
    from bakery.stages.fit.spec import load_spec

    spec = load_spec(spec_path)
    device = open_device(device_kind)
    sig = reflect(device, spec)
    w, h = spec.size or Image.open(spec.reference).size
    images = {n: load_image(b.path) for n, b in spec.args.items() if b.kind == "image"}
    placeholder = np.zeros((h, w, sig.return_width), np.float32)
    obj = ShaderFit(device, spec, sig, placeholder, images, {}, seed=0)
    for name, v in values.items():
        obj.groups[name].upload(np.asarray(v, np.float32))
    return obj.render(Trainer(device, None, obj, TrainConfig(steps=1, batch=obj.pixels)))


def rainbow_warp(uv: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """rainbow_warp() of assets/fit/rainbow.slang in float64: [..., 2] UV, [...] mask -> [..., 3]."""
    tau = 2.0 * np.pi
    u, v = uv[..., 0], uv[..., 1]
    wu = u + 0.12 * mask * np.sin(tau * v)
    wv = v + 0.12 * mask * np.cos(tau * u)
    phase = 0.7 * wu + 0.5 * wv + 0.35 * mask
    offsets = np.array([0.0, 1.0 / 3.0, 2.0 / 3.0])
    return 0.5 + 0.5 * np.cos(tau * (phase[..., None] + offsets))


def pixel_uv(size: int) -> np.ndarray:
    """The fit stage's UV grid: pixel centres, [size, size, 2] (u right, v down)."""
    y, x = np.mgrid[0:size, 0:size]
    return np.stack([(x + 0.5) / size, (y + 0.5) / size], axis=-1)


def make(out: Path, size: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != REPO_FIT.resolve():
        for name in SOURCES:
            shutil.copy(REPO_FIT / name, out / name)
    # (a) brightness: keep the source inside [0.2, 0.78] so source + amount never clips.
    src = np.round((0.2 + 0.58 * fractal_noise(np.random.default_rng(SEED), size, channels=3)) * 255).astype(np.int32)
    save_png(out / "brightness_source.png", src / 255.0)
    ref = src + np.asarray(AMOUNT_STEPS, np.int32)
    assert ref.min() >= 0 and ref.max() <= 255
    save_png(out / "brightness_reference.png", ref / 255.0)
    # (b) rainbow: the truth mask, then the reference the shader renders from it.
    mask = truth_mask(size)
    save_png(out / "rainbow_mask_truth.png", mask)
    mask8 = np.round(mask[:, :, 0] * 255.0) / 255.0  # exactly what the PNG holds
    save_png(out / "rainbow_reference.png", rainbow_warp(pixel_uv(size), mask8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO_FIT)
    ap.add_argument("--size", type=int, default=128)
    args = ap.parse_args()
    make(args.out, args.size)
    print(f"wrote fit examples to {args.out}")


if __name__ == "__main__":
    main()
