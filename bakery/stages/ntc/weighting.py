"""Per-texture loss weights: where a material's shared latents and decoder spend capacity.

Plain MSE over the set gives capacity to the maps with the most error energy. What a
studio asks of a compressed set is that *every* map beat what it ships today (BCn at equal
bytes), so the two weightings here aim at margins over BCn:

- ``bcn`` (a priori): each texture weighted by 1 / MSE of BCn at equal bytes.
- ``margin`` (measured): training pauses a few times, decodes the set, and moves weight
  from the textures furthest above BCn to those nearest it (:func:`rebalance`), so the
  margins converge on a common one instead of a few maps taking what the weakest need.

Maps BCn keeps near-lossless (flat ones) keep weight 1: they are easy, and their dB
figure (~110 dB one step, inf the next) would only add noise to a margin.
"""

from __future__ import annotations

import math

import numpy as np

WEIGHT_RANGE = (0.25, 8.0)
NEAR_LOSSLESS_DB = 50.0
#: Pauses of ``margin`` weighting, spread evenly over the steps before the latents freeze.
MARGIN_ROUNDS = 8
#: dB of weight change per dB of a texture's margin below the mean (each round).
MARGIN_GAIN = 0.75
#: ``margin`` weights' clamp: wider than WEIGHT_RANGE, since a map far above BCn (AO,
#: normals) can give most of its weight away and keep its margin.
MARGIN_WEIGHT_RANGE = (1 / 16, 16.0)


def _normalised(weights: dict[str, float], channels: dict[str, int], roles, limits=WEIGHT_RANGE) -> dict[str, float]:
    """``roles``' weights scaled so their channel-weighted mean is 1, then clamped."""
    total = sum(channels[r] for r in roles) / sum(channels[r] * weights[r] for r in roles)
    return {r: float(np.clip(weights[r] * total, *limits)) if r in roles else weights[r] for r in weights}


def bcn_weights(report: dict, roles, channels: dict[str, int]) -> dict[str, float]:
    """Per-texture loss weights that aim every texture at the same margin over BCn at equal
    bytes. The weighted L2 then sums MSE_t / MSE_BCn,t over textures (each texture's
    weight times its channel count proportional to 1 / MSE_BCn,t), a soft minimum of the
    margins: capacity moves to the maps BCn keeps well (albedo, roughness) and away from
    those it does not (AO, normals), instead of going to the maps with the most energy as
    plain MSE would. Normalised to the uniform total, clamped to WEIGHT_RANGE."""
    inv = {r: 10 ** (report["textures"][r]["same_bytes_psnr"] / 10) for r in roles
           if report["textures"][r]["same_bytes_psnr"] <= NEAR_LOSSLESS_DB}
    if not inv:
        return {r: 1.0 for r in roles}
    per_channel = {r: inv.get(r, 0.0) / channels[r] for r in roles}
    return _normalised({r: per_channel[r] if r in inv else 1.0 for r in roles}, channels, list(inv))


def margins(psnr: dict[str, float], report: dict) -> dict[str, float]:
    """Each texture's dB over BCn at equal bytes, for the textures a margin means
    something for (neither side near-lossless)."""
    out = {}
    for role, value in psnr.items():
        bcn = report["textures"][role]["same_bytes_psnr"]
        if bcn <= NEAR_LOSSLESS_DB and math.isfinite(value) and value <= NEAR_LOSSLESS_DB:
            out[role] = float(value - bcn)
    return out


def rebalance(weights: dict[str, float], psnr: dict[str, float], report: dict,
              channels: dict[str, int], gain: float | None = None) -> dict[str, float]:
    """One round of ``margin`` weighting: each texture's weight times
    10^(gain * (mean margin - its margin) / 10), renormalised to the uniform total and
    clamped to MARGIN_WEIGHT_RANGE. A texture 2 dB under the mean margin gets 1.5 dB (x1.41)
    more weight at gain 0.75; one above it gives weight back. Textures without a margin
    keep theirs."""
    gain = MARGIN_GAIN if gain is None else gain
    m = margins(psnr, report)
    if len(m) < 2:
        return dict(weights)
    mean = float(np.mean(list(m.values())))
    moved = {r: w * 10 ** (gain * (mean - m[r]) / 10) if r in m else w for r, w in weights.items()}
    return _normalised(moved, channels, list(m), MARGIN_WEIGHT_RANGE)
