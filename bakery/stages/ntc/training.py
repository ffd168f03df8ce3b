"""Training one material's texture set at a rate: latents and decoder together, the
per-texture loss weights (ntc/weighting.py), BC4 re-encodes in BC mode, the frozen-latent
tail in packed mode, and the target-PSNR search over rates.

Everything the rates of one set share (the material, the resolved settings, the BCn
comparison at each rate, encoded once) lives in :class:`SetTraining`; each trained rate is
a :class:`TrainedRate`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bakery import phases
from bakery.imaging import mean_psnr, psnr, set_psnr
from bakery.materials import renormalize_normals
from bakery.nn.optimizers import Adam
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.progress import TrainingProgress
from bakery.stages.ntc import bc4, packing
from bakery.stages.ntc.objective import LatentTextureFit
from bakery.stages.ntc.rate import RatePoint
from bakery.stages.ntc.weighting import MarginSteering, bcn_weights

#: Packed latents freeze for this last fraction of the steps: the decoder fits the final
#: codes (as RTXNTC does).
FREEZE_FRACTION = 0.05
#: Seconds between the live set-PSNR readouts in the progress (each decodes the whole set).
PROBE_INTERVAL_S = 10.0


@dataclass
class TrainedRate:
    """One rate trained to the end: its objective and trainer (still on the device, for the
    mip decodes), the set decoded at mip 0 and its PSNR per role."""

    point: RatePoint
    fit: LatentTextureFit
    trainer: Trainer
    decoded: np.ndarray
    scores: dict[str, float]
    steering: MarginSteering | None
    latents_frozen_from: int | None   # packed mode: the step from which only the decoder trained

    @property
    def mean_psnr(self) -> float:
        return mean_psnr(self.scores.values())

    def decode_mips(self, normal_channel: int) -> list[np.ndarray]:
        """Every colour mip as the decoder reproduces it (normals renormalised), mip 0 first."""
        return [self.decoded] + [renormalize_normals(self.fit.decode_mip(self.trainer, m), normal_channel)
                                 for m in range(1, len(self.point.grid.color_mips))]


class SetTraining:
    """Trains rates of one material with one set of resolved settings."""

    def __init__(self, ctx, name: str, material, params: dict, side=None):
        self.ctx, self.name, self.material, self.params = ctx, name, material, params
        self.side = side   # bakery.overlap.SideWork: where the BCn comparisons encode beside training
        self.textures = material.split(material.image)
        self.channels = {r: n for r, (_, n) in zip(material.roles, material.slices)}
        self.config = TrainConfig(steps=params["steps"], batch=params["batch"], optimizer=Adam(lr=params["lr"]),
                                  schedule="cosine", seed=ctx.seed)
        self.freeze_step = self.config.steps - int(FREEZE_FRACTION * self.config.steps)
        self._bcn: dict[float, tuple[dict, dict]] = {}

    def bcn_at(self, bpp: float) -> dict:
        """The BCn shipping set and its comparison at ``bpp``'s bytes (one encode per rate)."""
        return self._bcn_encode(bpp)[0]

    def bcn_images(self, bpp: float) -> dict[str, np.ndarray]:
        """The BCn shipping set at full resolution, decoded as a shader reads it, by role."""
        return self._bcn_encode(bpp)[1]

    def start_bcn(self, bpp: float) -> None:
        """Starts encoding the BCn comparison at ``bpp`` beside training (with side work;
        at once without): the rate is known before training, the comparison is needed
        only at the first steering pause and after training."""
        if bpp in self._bcn:
            return
        from bakery.baselines.material import baseline_report
        if self.side is not None:
            self._bcn[bpp] = self.side.submit("baselines", baseline_report, self.textures, neural_bpp=bpp,
                                              return_images=True)
        else:
            self._bcn_encode(bpp)

    def _bcn_encode(self, bpp: float) -> tuple[dict, dict]:
        if bpp not in self._bcn:
            from bakery.baselines.material import baseline_report
            with phases.time("baselines"):
                self._bcn[bpp] = baseline_report(self.textures, neural_bpp=bpp, return_images=True)
        found = self._bcn[bpp]
        return found if isinstance(found, tuple) else found.result()

    def role_weights(self, point: RatePoint, steering: MarginSteering | None) -> dict[str, float]:
        """The weighting's factor per role, as the rate finished training (before the
        ``weight_<role>`` params)."""
        if steering is not None:
            return steering.weights
        if self.params["weighting"] == "bcn":
            return bcn_weights(self.bcn_at(point.bpp), self.material.roles, self.channels)
        return {r: 1.0 for r in self.material.roles}

    def channel_weights(self, role_weights: dict[str, float]) -> np.ndarray:
        return np.concatenate([np.full(n, self.params[f"weight_{r}"] * role_weights[r], np.float32)
                               for r, (_, n) in zip(self.material.roles, self.material.slices)])

    def scores(self, fit: LatentTextureFit, trainer: Trainer) -> tuple[np.ndarray, dict[str, float]]:
        m = self.material
        decoded = renormalize_normals(fit.decode(trainer), m.normal_channel)
        return decoded, {r: psnr(decoded[..., a:a + n], m.image[..., a:a + n]) for r, (a, n) in zip(m.roles, m.slices)}

    def train(self, point: RatePoint) -> TrainedRate:
        with phases.time("training"):   # the pauses' decodes and the final one count as metrics
            return self._train(point)

    def _train(self, point: RatePoint) -> TrainedRate:
        p, cfg, m = self.params, self.config, self.material
        lazy = p["latent_updates"] == "lazy"   # lazy updates read only the cells the kernel marked
        fit = LatentTextureFit(self.ctx.device, m.image, point.grid,
                               channel_weights=self.channel_weights(self.role_weights(point, None)),
                               normal_channel=m.normal_channel, latent_lr=p["latent_lr"], seed=self.ctx.seed,
                               noise_steps=int(p["noise_fraction"] * cfg.steps), lazy_latents=lazy,
                               touched_cells=lazy, line_texels=p["line_texels"], patches=p["patches"])
        trainer = Trainer(self.ctx.device, point.network, fit, cfg)
        # the set's PSNR now and then: a decode of the whole set, so rarely (it changes no byte)
        progress = TrainingProgress(self.ctx.progress, cfg.steps, interval_s=PROBE_INTERVAL_S,
                                    probe=lambda done: {"set_psnr_db": set_psnr(self.scores(fit, trainer)[1].values())})
        steering = None
        if p["weighting"] == "margin":
            steerable = [r for r in m.roles if p[f"weight_{r}"] > 0]
            steering = MarginSteering(lambda: self.bcn_at(point.bpp), m.roles, steerable, self.channels, p["margin_db"],
                                      self.freeze_step)

        def advance(end):
            """Trains to step ``end``, stopping at each of the steering's pauses on the way
            to decode the set and hand the textures new weights."""
            end = min(end, cfg.steps)
            while True:
                at = steering.next_pause() if steering is not None else None
                if at is not None and at <= trainer.step:
                    if point.grid.mode == "bc":
                        refresh_bc(fit)   # measure the latents as they would ship
                    with phases.time("metrics"):
                        now = self.scores(fit, trainer)[1]
                    fit.set_channel_weights(self.channel_weights(steering.pause(trainer.step, now)))
                    last = steering.rounds[-1]
                    self.ctx.log.info("%s: step %d, margins over BCn at equal bytes %s; weights now %s", self.name,
                                      trainer.step, last["margin_db"], last["margin_weights"])
                    continue
                if trainer.step >= end:
                    return
                trainer.train((end if at is None else min(end, at)) - trainer.step, progress=progress)

        frozen_from = None
        if point.grid.mode == "bc":
            while trainer.step < cfg.steps:
                refresh_bc(fit)
                advance(trainer.step + p["bc_refresh"])
            refresh_bc(fit)
        else:
            advance(self.freeze_step)
            fit.latents.lr, frozen_from = 0.0, self.freeze_step   # the last steps fit the decoder to the final codes
            advance(cfg.steps)
        with phases.time("metrics"):
            decoded, scores = self.scores(fit, trainer)
        return TrainedRate(point, fit, trainer, decoded, scores, steering, frozen_from)

    def search(self, points: list[RatePoint], target: float) -> tuple[TrainedRate, list[dict]]:
        """Bisection over rates (cheapest first) for the cheapest one whose mean PSNR
        reaches ``target``; also every rate tried, in order."""
        lo, hi, best, richest, tried = 0, len(points) - 1, None, None, []
        while lo <= hi:
            mid = (lo + hi) // 2
            result = self.train(points[mid])
            tried.append({"bpp": round(points[mid].bpp, 4), "mean_psnr_db": round(result.mean_psnr, 3)})
            if result.mean_psnr >= target:
                best, hi = result, mid - 1
            else:
                richest, lo = result, mid + 1
        if best is None:
            self.ctx.log.warning("target PSNR %.2f dB not reached; keeping the richest rate tried (%.2f bpp)",
                                 target, richest.point.bpp)
            return richest, tried
        return best, tried


def refresh_bc(fit: LatentTextureFit) -> None:
    """Re-encode the latents as BC4 and hand the training kernel decoded - raw."""
    raw = fit.raw_latents()
    _, decoded = bc4.encode_levels(packing.split_levels(fit.grid, raw))
    fit.set_block_compression_delta(np.concatenate([d.reshape(-1) for d in decoded]) - raw)
