"""Tileable noise made in the Fourier domain: what the sample-asset generators draw detail
from (scripts/make_assets.py, scripts/make_fit_assets.py). Everything wraps, so the
materials built from it tile."""

from __future__ import annotations

import numpy as np


def fractal_noise(rng: np.random.Generator, n: int, beta: float = 2.0, channels: int = 1) -> np.ndarray:
    """Tileable noise with power spectrum ~ 1/f^beta (beta≈2: natural images), in [0, 1]."""
    fy = np.fft.fftfreq(n)[:, None]
    fx = np.fft.fftfreq(n)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    amp = f ** (-beta / 2.0)
    amp[0, 0] = 0.0
    out = np.empty((n, n, channels), np.float32)
    for c in range(channels):
        spec = np.fft.fft2(rng.standard_normal((n, n))) * amp
        x = np.real(np.fft.ifft2(spec))
        x = (x - x.mean()) / (x.std() + 1e-8)
        out[:, :, c] = 0.5 + 0.18 * x
    return np.clip(out, 0.0, 1.0)


def blur(x: np.ndarray, sigma: float) -> np.ndarray:
    """Periodic Gaussian blur (FFT), so derived maps tile like their height."""
    n = x.shape[0]
    fy = np.fft.fftfreq(n)[:, None]
    fx = np.fft.fftfreq(n)[None, :]
    g = np.exp(-2.0 * (np.pi * sigma) ** 2 * (fx * fx + fy * fy))
    return np.real(np.fft.ifft2(np.fft.fft2(x) * g)).astype(np.float32)
