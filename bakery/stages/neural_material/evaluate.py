"""Rendered quality of the student against the teacher: a lit plane (one pixel per
texel, directional light of irradiance pi, orthographic view) under held-out directions,
shown through Reinhard and sRGB; PSNR from the pooled MSE of all renders, FLIP (LDR)
as the mean over renders, on a centre crop of at most ``FLIP_CROP`` pixels a side (FLIP
costs seconds per megapixel on the CPU; the crop is recorded in the manifest)."""

from __future__ import annotations

import numpy as np

from bakery.imaging import linear_to_srgb, psnr_from_mse

IRRADIANCE = np.pi  # a white Lambertian plane lit head-on shows 1
FLIP_CROP = 1024


def display(brdf_cos: np.ndarray) -> np.ndarray:
    """BRDF x cos -> displayed sRGB in [0, 1] (Reinhard tone map of the radiance)."""
    radiance = IRRADIANCE * np.maximum(brdf_cos, 0.0)
    return linear_to_srgb(radiance / (1.0 + radiance)).astype(np.float32)


def psnr_pooled(teachers: list[np.ndarray], students: list[np.ndarray]) -> float:
    return psnr_of_displays([display(t) for t in teachers], [display(s) for s in students])


def psnr_of_displays(teachers: list[np.ndarray], students: list[np.ndarray]) -> float:
    """:func:`psnr_pooled` of renders already through :func:`display` (a bake shows each
    render once and scores it several times: pooled, per direction, against the uniform
    material, in the previews)."""
    mse = np.mean([np.mean((t - s) ** 2) for t, s in zip(teachers, students)])
    return psnr_from_mse(max(float(mse), 1e-20))


def flip_mean(teachers: list[np.ndarray], students: list[np.ndarray]) -> float:
    import flip_evaluator

    values = []
    for t, s in zip(teachers, students):
        t, s = _centre(t), _centre(s)
        _, mean, _ = flip_evaluator.evaluate(display(t), display(s), "LDR", inputsRGB=True, applyMagma=False)
        values.append(float(mean))
    return float(np.mean(values))


def preview(teacher: np.ndarray, student: np.ndarray) -> np.ndarray:
    """Teacher | student | 4x absolute difference, side by side."""
    return preview_of_displays(display(teacher), display(student))


def preview_of_displays(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`preview` of renders already through :func:`display`."""
    return np.concatenate([a, b, np.clip(4.0 * np.abs(a - b), 0.0, 1.0)], axis=1)


def _centre(image: np.ndarray) -> np.ndarray:
    h, w = image.shape[:2]
    y, x = max(0, (h - FLIP_CROP) // 2), max(0, (w - FLIP_CROP) // 2)
    return image[y:y + FLIP_CROP, x:x + FLIP_CROP]
