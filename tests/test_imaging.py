"""Image maths rewritten for speed give the bits the plain formulas give: a bundle's bytes
(and training steered by PSNR) must not move when the host work gets cheaper."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.imaging import box_down, psnr, psnr_uint8, to_uint8
from bakery.materials import renormalize_normals


def _reference_psnr(a, b):
    qa = (np.clip(a.astype(np.float32), 0, 1) * 255.0 + 0.5).astype(np.uint8).astype(np.float64) / 255.0
    qb = (np.clip(b.astype(np.float32), 0, 1) * 255.0 + 0.5).astype(np.uint8).astype(np.float64) / 255.0
    return 10.0 * np.log10(1.0 / float(np.mean((qa - qb) ** 2)))


def _reference_box_down(image):
    h, w = image.shape[:2]
    ys = [np.minimum(2 * np.arange(max(1, h >> 1)) + d, h - 1) for d in (0, 1)]
    xs = [np.minimum(2 * np.arange(max(1, w >> 1)) + d, w - 1) for d in (0, 1)]
    return sum(image[y][:, x] for y in ys for x in xs) * 0.25


def test_psnr_is_the_float64_formula_to_the_bit():
    rng = np.random.default_rng(3)
    a = rng.random((96, 64, 3), np.float32) * 1.2 - 0.1   # values outside [0, 1] are clamped
    b = np.clip(a + rng.normal(0, 0.05, a.shape).astype(np.float32), 0, 1)
    assert psnr(a, b) == _reference_psnr(a, b)
    assert psnr_uint8(to_uint8(a[..., 1:2]), to_uint8(b[..., 1:2])) == _reference_psnr(a[..., 1:2], b[..., 1:2])
    assert psnr(a, a) == float("inf")


@pytest.mark.parametrize("shape", [(64, 32, 3), (33, 16, 1), (16, 7, 2), (1, 8, 4)])
def test_box_down_matches_the_gathered_formula(shape):
    image = np.random.default_rng(4).random(shape, np.float32)
    out = box_down(image)
    assert out.dtype == image.dtype and np.array_equal(out, _reference_box_down(image))


def _reference_renormalize(image, c):
    out = image.copy()
    n = out[..., c:c + 3] * 2.0 - 1.0
    n /= np.sqrt((n * n).sum(-1, keepdims=True) + 1e-6)
    out[..., c:c + 3] = n * 0.5 + 0.5
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normals_renormalised_as_the_plain_formula_in_place_or_not(dtype):
    image = np.random.default_rng(5).random((64, 48, 5)).astype(dtype)
    copy = renormalize_normals(image, 1)
    assert copy.dtype == dtype and np.array_equal(copy, _reference_renormalize(image, 1))
    assert not np.array_equal(copy, image)   # the copy left the input alone
    same = renormalize_normals(image, 1, in_place=True)
    assert same is image and np.array_equal(same, copy)
