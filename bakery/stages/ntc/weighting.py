"""Per-texture loss weights: where a material's shared latents and decoder spend capacity.

Plain MSE over the set gives capacity to the maps with the most error energy. What a
studio asks of a compressed set is that *every* map beat what it ships today (BCn at equal
bytes), so the two weightings here aim at margins over BCn:

- ``bcn`` (a priori): each texture weighted by 1 / MSE of BCn at equal bytes.
- ``margin`` (measured): training pauses a few times, decodes the set, and raises the
  weight of every texture under a target margin over BCn until it reaches it
  (:func:`raise_boosts`); the others keep plain MSE's weighting, less what the raised
  ones take. The set keeps what quality it can while the weakest maps are steered up.

Maps BCn keeps near-lossless (flat ones) keep weight 1: they are easy, and their dB
figure (~110 dB one step, inf the next) would only add noise to a margin.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

#: ``bcn`` weights' clamp: no map's weight more than 8x or less than 1/4 of uniform's.
WEIGHT_RANGE = (0.25, 8.0)
#: Above this PSNR a map is as good as lossless in 8-bit storage: BCn keeping a map above it
#: marks a flat map, and a decode above it counts as this.
NEAR_LOSSLESS_DB = 50.0
#: Pauses of ``margin`` weighting, spread evenly over the steps before the last
#: FREEZE_FRACTION (ntc/training.py; packed latents freeze there).
MARGIN_ROUNDS = 8
#: dB of extra weight per dB a texture is under its target margin (each round).
MARGIN_GAIN = 2.0
#: The pauses aim this far above the asked margin: they see the set before its last steps.
MARGIN_CUSHION_DB = 1.0
#: ``margin`` weights' clamp: wider than WEIGHT_RANGE, since the maps far above BCn (AO,
#: normals) can give most of their weight away and keep their margins.
MARGIN_WEIGHT_RANGE = (1 / 16, 16.0)
#: The largest boost: the clamp's whole span, past which more boost would only push the
#: other maps down.
MAX_BOOST_DB = 10 * math.log10(MARGIN_WEIGHT_RANGE[1] / MARGIN_WEIGHT_RANGE[0])


def bcn_weights(report: dict, roles, channels: dict[str, int]) -> dict[str, float]:
    """Per-texture loss weights that aim every texture at the same margin over BCn at equal
    bytes. The weighted L2 then sums MSE_t / MSE_BCn,t over textures (each texture's
    weight times its channel count proportional to 1 / MSE_BCn,t), a soft minimum of the
    margins: capacity moves to the maps BCn keeps well (albedo, roughness) and away from
    those it does not (AO, normals), instead of going to the maps with the most energy as
    plain MSE would. Normalised to the uniform total, clamped to WEIGHT_RANGE. Maps BCn
    keeps near-lossless (> NEAR_LOSSLESS_DB: flat maps) keep weight 1: they are easy."""
    inv = {r: 10 ** (report["textures"][r]["same_bytes_psnr"] / 10) for r in roles
           if report["textures"][r]["same_bytes_psnr"] <= NEAR_LOSSLESS_DB}
    if not inv:
        return {r: 1.0 for r in roles}
    total = sum(channels[r] for r in inv) / sum(inv.values())
    return {r: float(np.clip(total * inv[r] / channels[r], *WEIGHT_RANGE)) if r in inv else 1.0 for r in roles}


def steered_roles(report: dict, roles) -> list[str]:
    """The roles ``margin`` weighting steers: those BCn does not keep near-lossless. The
    others (flat maps) keep weight 1 whatever the rest get, so that they still decode
    near-exact."""
    return [r for r in roles if report["textures"][r]["same_bytes_psnr"] <= NEAR_LOSSLESS_DB]


def margins(psnr: dict[str, float], report: dict) -> dict[str, float]:
    """Each steered texture's dB over BCn at equal bytes, its PSNR counted at most
    NEAR_LOSSLESS_DB (a decode that exact is as good as lossless; inf counts as that)."""
    return {r: float(min(psnr[r], NEAR_LOSSLESS_DB) - report["textures"][r]["same_bytes_psnr"])
            for r in steered_roles(report, psnr)}


def raise_boosts(boosts: dict[str, float], psnr: dict[str, float], report: dict, target_db: float,
                 gain: float | None = None) -> dict[str, float]:
    """One pause of ``margin`` weighting, as dual ascent on "every texture at least
    ``target_db`` over BCn at equal bytes": each texture's boost (dB of extra loss weight,
    between 0 and MAX_BOOST_DB) grows by ``gain`` x its shortfall, and shrinks back while it
    is over the target. A texture over the target keeps no boost; its weight falls only by
    what the boosted ones take, so a material whose maps all clear the target trains as
    plain MSE would."""
    gain = MARGIN_GAIN if gain is None else gain
    m = margins(psnr, report)
    return {r: min(MAX_BOOST_DB, max(0.0, b + gain * (target_db - m[r]))) if r in m else b
            for r, b in boosts.items()}


def boost_weights(boosts: dict[str, float], channels: dict[str, int]) -> dict[str, float]:
    """Loss weights of the steered roles from their boosts: 10^(boost / 10), scaled so their
    channel-weighted mean is 1 (the maps without a boost give up what the boosted gain),
    clamped to MARGIN_WEIGHT_RANGE."""
    raw = {r: 10 ** (b / 10) for r, b in boosts.items()}
    total = sum(channels[r] for r in raw) / sum(channels[r] * w for r, w in raw.items())
    return {r: float(np.clip(w * total, *MARGIN_WEIGHT_RANGE)) for r, w in raw.items()}


class MarginSteering:
    """``margin`` weighting over one training run: its pauses (MARGIN_ROUNDS, evenly before
    step ``until``, none at step 0 or twice at one step), the boosts and weights so far, and
    a record of every pause. The caller trains, decodes at each pause and hands the
    textures' PSNRs to :meth:`pause`. ``roles``: the material's; those not steered (flat, or
    weighted 0 by the user: a map nothing trains would take every boost) keep weight 1.
    ``report`` (BCn at equal bytes) may be a function giving it, called at the first pause:
    the comparison can still be encoding beside training until then (bakery.overlap)."""

    def __init__(self, report: dict | Callable[[], dict], roles, steerable, channels: dict[str, int],
                 margin_db: float, until: int):
        self._report, self._steerable, self.channels = report, list(steerable), channels
        self.aim = margin_db + MARGIN_CUSHION_DB
        self._boosts: dict[str, float] | None = None
        self.weights = {r: 1.0 for r in roles}
        self.pauses = sorted({until * k // (MARGIN_ROUNDS + 1) for k in range(1, MARGIN_ROUNDS + 1)} - {0})
        self.rounds: list[dict] = []

    @property
    def report(self) -> dict:
        if callable(self._report):
            self._report = self._report()
        return self._report

    @property
    def boosts(self) -> dict[str, float]:
        if self._boosts is None:
            self._boosts = {r: 0.0 for r in steered_roles(self.report, self._steerable)}
        return self._boosts

    @boosts.setter
    def boosts(self, value: dict[str, float]) -> None:
        self._boosts = value

    def next_pause(self) -> int | None:
        """The step of the next pause, or None after the last."""
        return self.pauses[len(self.rounds)] if len(self.rounds) < len(self.pauses) else None

    def pause(self, step: int, psnr: dict[str, float]) -> dict[str, float]:
        """Raises the boosts from the textures' PSNR at ``step``; returns every role's
        margin weight (the user's ``weight_<role>`` multiplies it)."""
        now = {r: psnr[r] for r in self.boosts}
        self.boosts = raise_boosts(self.boosts, now, self.report, self.aim)
        if self.boosts:
            self.weights = {**self.weights, **boost_weights(self.boosts, self.channels)}
        self.rounds.append({"step": step,
                            "margin_db": {r: round(v, 3) for r, v in margins(now, self.report).items()},
                            "boost_db": {r: round(v, 3) for r, v in self.boosts.items()},
                            "margin_weights": {r: round(v, 4) for r, v in self.weights.items()}})
        return self.weights
