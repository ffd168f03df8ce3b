"""Set PSNR from the mean MSE: the figure benchmarks report for texture sets."""

from __future__ import annotations

import math

import pytest

from bakery.imaging import set_psnr


def test_set_psnr_is_the_psnr_of_the_mean_mse():
    # 20 dB and 30 dB are MSEs 1e-2 and 1e-3: their mean 5.5e-3 is 22.6 dB, not 25 dB.
    assert set_psnr([20.0, 30.0]) == pytest.approx(-10 * math.log10(5.5e-3))


def test_a_lossless_map_counts_as_zero_error_and_does_not_swing_the_mean():
    near = set_psnr([30.0, 110.0])
    exact = set_psnr([30.0, math.inf])
    assert abs(near - exact) < 1e-6  # a constant map at ~110 dB or inf: the same set figure
    assert set_psnr([math.inf, math.inf]) == math.inf
