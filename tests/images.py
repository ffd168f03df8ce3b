"""Small synthetic test images with photo-like structure (shaded shapes over a gradient,
soft edges, low-frequency 1/f texture), made in code so tests need no image files."""

from __future__ import annotations

import numpy as np


def photo_like(size: int = 256, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lin = (np.arange(size) + 0.5) / size
    y, x = np.meshgrid(lin, lin, indexing="ij")
    img = np.stack([0.35 + 0.4 * y, 0.5 + 0.3 * y, 0.85 - 0.2 * y], -1)  # sky-like gradient
    for _ in range(6):
        cx, cy, r = rng.uniform(0.15, 0.85), rng.uniform(0.2, 0.9), rng.uniform(0.08, 0.22)
        colour = rng.uniform(0.1, 0.9, 3)
        d = np.sqrt((x - cx) ** 2 + (y - cy) ** 2)
        mask = np.clip((r - d) * size / 3.0, 0.0, 1.0)[..., None]  # a soft edge of ~3 px
        shade = (0.75 + 0.25 * np.clip(1.0 - ((x - cx + 0.3 * r) ** 2 + (y - cy + 0.3 * r) ** 2) / r**2, 0, 1))
        img = img * (1 - mask) + mask * colour * shade[..., None]
    f = np.fft.fftfreq(size)
    k = np.sqrt(f[:, None] ** 2 + f[None, :] ** 2)
    k[0, 0] = 1.0
    noise = np.real(np.fft.ifft2(np.fft.fft2(rng.standard_normal((size, size))) / k ** 1.5))
    noise = (noise - noise.mean()) / noise.std()
    img = img + 0.03 * noise[..., None]
    return np.clip(img, 0.0, 1.0).astype(np.float32)
