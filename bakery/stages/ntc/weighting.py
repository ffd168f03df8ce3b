"""Per-texture loss weights: where a material's shared latents and decoder spend capacity.

Plain MSE over the set gives capacity to the maps with the most error energy. What a
studio asks of a compressed set is that *every* map beat what it ships today (BCn at equal
bytes), so the two weightings here aim at margins over BCn:

- ``bcn`` (a priori): each texture weighted by 1 / MSE of BCn at equal bytes.
- ``margin`` (measured): training pauses a few times, decodes the set, and raises the
  weight of every texture under a target margin over BCn until it reaches it
  (:func:`raise_boosts`); the others keep plain MSE's weighting, less what the raised
  ones take. The set keeps the quality it can while no map falls under the target.

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
#: dB of extra weight per dB a texture is under its target margin (each round).
MARGIN_GAIN = 2.0
#: The pauses aim this far above the asked margin: they see the set before its last steps.
MARGIN_CUSHION_DB = 1.0
#: ``margin`` weights' clamp: wider than WEIGHT_RANGE, since the maps far above BCn (AO,
#: normals) can give most of their weight away and keep their margins.
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


def raise_boosts(boosts: dict[str, float], psnr: dict[str, float], report: dict, target_db: float,
                 gain: float | None = None) -> dict[str, float]:
    """One pause of ``margin`` weighting, as dual ascent on "every texture at least
    ``target_db`` over BCn at equal bytes": each texture's boost (dB of extra loss weight,
    never below 0) grows by ``gain`` x its shortfall, and shrinks back while it is over the
    target. Textures over the target with no boost keep plain MSE's weight, so a material
    whose maps all beat the target trains as uniform weighting would."""
    gain = MARGIN_GAIN if gain is None else gain
    m = margins(psnr, report)
    return {r: max(0.0, b + gain * (target_db - m[r])) if r in m else b for r, b in boosts.items()}


def compared_roles(report: dict, roles) -> list[str]:
    """The roles ``margin`` weighting steers: those BCn does not keep near-lossless. The
    others (flat maps) keep weight 1 whatever the rest get, so that they still decode
    near-exact."""
    return [r for r in roles if report["textures"][r]["same_bytes_psnr"] <= NEAR_LOSSLESS_DB]


def boost_weights(boosts: dict[str, float], channels: dict[str, int]) -> dict[str, float]:
    """Loss weights of the steered roles from their boosts: 10^(boost / 10), scaled so their
    channel-weighted mean is 1 (the maps without a boost give up what the boosted gain),
    clamped to MARGIN_WEIGHT_RANGE."""
    return _normalised({r: 10 ** (b / 10) for r, b in boosts.items()}, channels, list(boosts), MARGIN_WEIGHT_RANGE)


class MarginSteering:
    """``margin`` weighting over one training run: its pauses (MARGIN_ROUNDS, evenly before
    step ``until``), the boosts and weights so far, and a record of every pause. The caller
    trains, decodes at each pause and hands the textures' PSNRs to :meth:`pause`."""

    def __init__(self, report: dict, roles, channels: dict[str, int], margin_db: float, until: int):
        self.report, self.channels = report, channels
        self.aim = margin_db + MARGIN_CUSHION_DB
        self.boosts = {r: 0.0 for r in compared_roles(report, roles)}
        self.weights = {r: 1.0 for r in roles}
        self.pauses = [until * k // (MARGIN_ROUNDS + 1) for k in range(1, MARGIN_ROUNDS + 1)]
        self.rounds: list[dict] = []

    def next_pause(self) -> int | None:
        """The step of the next pause, or None after the last."""
        return self.pauses[len(self.rounds)] if len(self.rounds) < len(self.pauses) else None

    def pause(self, step: int, psnr: dict[str, float]) -> dict[str, float]:
        """Raises the boosts from the textures' PSNR at ``step``; returns every role's weight."""
        self.boosts = raise_boosts(self.boosts, psnr, self.report, self.aim)
        if self.boosts:
            self.weights = {**self.weights, **boost_weights(self.boosts, self.channels)}
        self.rounds.append({"step": step,
                            "margin_db": {r: round(v, 3) for r, v in margins(psnr, self.report).items()},
                            "boost_db": {r: round(v, 3) for r, v in self.boosts.items()},
                            "role_weights": {r: round(v, 4) for r, v in self.weights.items()}})
        return self.weights
