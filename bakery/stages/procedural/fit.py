"""Fitting the continuous parameters of many candidate programs in one go.

Every (structure, restart) pair is a job with its own parameter slots in one
:class:`PlainParameters` group; every structure is a few instructions for the fitting
interpreter (bytecode.py, interpreter.slang), compiled once per device, so each training
step is one statistics dispatch, one backward dispatch and one Adam dispatch for all the
jobs of a generation, and a new structure costs no compile. The loop is the shared
:class:`Trainer`'s; only the backward pass gains the statistics dispatch in front (see
fit.slang). Each job samples its pixels by its own index (fit.slang), so how jobs are
batched does not change any job's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bakery.nn.optimizers import Adam
from bakery.nn.parameters import PlainParameters, make_buffer
from bakery.nn.trainer import GROUP, TrainConfig, Trainer
from bakery.stages.procedural import bytecode, texture_stats
from bakery.stages.procedural.dsl import Node, param_count, param_scales

@dataclass(frozen=True)
class FitConfig:
    steps: int = 200
    batch: int = 4096            # samples per job and step (rounded to a multiple of 64)
    lr: float = 0.02
    pixel_weight: float = 1.0
    texture_weight: float = 1.0
    stats_every: int = 1         # steps between refreshes of the statistics (stale ones slow convergence)
    seed: int = 0
    blur: float = 4.0            # edge footprint (texels) at the first step; 1 from 70% of the steps on
    tile: bool = False           # noise lattices wrap (the target tiles)


@dataclass
class JobResult:
    structure: int               # index into the batch's structures
    params: np.ndarray           # fitted values in shader units
    render: np.ndarray           # [H, W, 3] at the target size
    pixel_mse: float
    texture_loss: float


def blur_at(step: int, steps: int, start: float) -> float:
    """The edge footprint in texels at ``step``: from ``start`` down to one texel over the
    first 70% of the fit (coarse to fine: wide edges pull misplaced ones in; exact ones
    finish), then one texel, what the shipped shader draws."""
    if steps <= 0 or start <= 1.0:
        return 1.0
    t = min(1.0, step / (0.7 * steps))
    return 1.0 + (start - 1.0) * (1.0 - t) ** 2


def fit_source(texture: bool = True) -> str:
    """The fitting kernels: the interpreter (any structure) under fit.slang's losses;
    ``texture`` False compiles the pixel loss alone."""
    return (f"#define BK_TEXTURE {int(texture)}\n"
            '#include "stages/procedural/interpreter.slang"\n#include "stages/procedural/fit.slang"\n')


class BatchObjective:
    """The Trainer's objective for one batch of jobs (see fit.slang for the kernels)."""

    def __init__(self, device, target: np.ndarray, structures: Sequence[Node],
                 jobs: Sequence[tuple[int, np.ndarray]], config: FitConfig, frozen: Sequence[np.ndarray] | None = None):
        self.device, self.structures, self.config = device, list(structures), config
        self.height, self.width = target.shape[:2]
        n = self.width * self.height
        self.batch = n if config.batch >= n else max(GROUP, config.batch // GROUP * GROUP)
        if self.batch % GROUP and config.steps > 0:
            raise ValueError(f"{self.width}x{self.height} has {n} pixels, not a multiple of {GROUP}; "
                             f"use a batch below {n}")
        self.scales = [param_scales(s) for s in self.structures]
        table, values, offset = [], [], 0
        for s, init in jobs:
            count = param_count(self.structures[s])
            table.append((s, offset, count, 0))
            values.append(np.asarray(init, np.float64) / self.scales[s])
            offset += count
        self.jobs = table
        held = np.zeros(max(1, offset), np.uint32)
        for (s, start, count, _), mask in zip(table, frozen or []):
            held[start:start + count] = np.asarray(mask, bool)
        self._frozen = make_buffer(device, held)
        flat = np.concatenate(values) if offset else np.zeros(1)
        self.group = PlainParameters(device, flat.astype(np.float32), lr=config.lr)
        self._target = make_buffer(device, np.ascontiguousarray(target[:, :, :3], np.float32).reshape(-1))
        self._jobs = make_buffer(device, np.asarray(table, np.uint32).reshape(-1))
        code, rows, scales = bytecode.pack(self.structures, tile=config.tile)
        self._code = make_buffer(device, code.reshape(-1))
        self._structures = make_buffer(device, rows.reshape(-1))
        self._scales = make_buffer(device, scales)
        self.stats = make_buffer(device, np.zeros(len(table) * (2 * texture_stats.STATS + 1), np.uint64))
        self._render = make_buffer(device, np.zeros(len(table) * n * 3, np.float32))
        self._source = fit_source(config.texture_weight > 0.0)

    def slang_source(self) -> str:
        return self._source

    def vars(self) -> dict:
        return {"g_plain_params": self.group.params, "g_plain_grads": self.group.grads, "g_target": self._target,
                "g_jobs": self._jobs, "g_frozen": self._frozen, "g_stats": self.stats,
                "g_render": self._render, "g_code": self._code, "g_structures": self._structures,
                "g_scales": self._scales}

    def uniforms(self, step: int, batch: int = 0, seed: int = 0) -> dict:
        c = self.config
        return {"jobs": len(self.jobs), "batch": self.batch, "width": self.width, "height": self.height,
                "seed": c.seed & 0xFFFFFFFF, "step": step, "pixel_weight": c.pixel_weight,
                "texture_weight": c.texture_weight, "blur": blur_at(step, c.steps, c.blur)}

    def param_groups(self) -> list:
        return [self.group]

    def record_prepass(self, encoder, step: int, seed: int) -> None:
        """The trainer's hook before each backward: refresh the renders' texture statistics
        (the texture term's gradient reads them) every ``stats_every`` steps."""
        if self.config.texture_weight > 0.0 and step % self.config.stats_every == 0:
            encoder.clear_buffer(self.stats)
            self.device.kernel(self.slang_source(), "stats_step").dispatch(
                [self.threads(), 1, 1], vars=self.vars(), command_encoder=encoder, u=self.uniforms(step))

    def threads(self) -> int:
        return len(self.jobs) * self.batch

    def results(self, trainer: Trainer, target_stats: np.ndarray, target: np.ndarray) -> list[JobResult]:
        n = self.width * self.height
        trainer.run_kernel("render", len(self.jobs) * n, self.uniforms(self.config.steps))
        renders = self._render.to_numpy().view(np.float32)[: len(self.jobs) * n * 3].reshape(
            len(self.jobs), self.height, self.width, 3)
        values = self.group.download().astype(np.float64)
        out = []
        for (s, offset, count, _), render in zip(self.jobs, renders):
            params = values[offset:offset + count] * self.scales[s]
            render = render.copy()
            ok = np.isfinite(render).all()
            mse = float(np.mean((render - target[:, :, :3]) ** 2)) if ok else float("inf")
            tex = texture_stats.texture_loss(render, target_stats) if ok else float("inf")
            out.append(JobResult(s, params, render, mse, tex))
        return out


def fit_jobs(device, target: np.ndarray, target_stats: np.ndarray, structures: Sequence[Node],
             jobs: Sequence[tuple[int, np.ndarray]], config: FitConfig,
             frozen: Sequence[np.ndarray] | None = None) -> list[JobResult]:
    """Fits every job (structure index, initial parameters in shader units) by Adam, one
    dispatch per step for all of them; ``frozen`` (per job, per slot) holds slots at their
    value. Returns each job's fitted parameters, render and losses (the texture loss
    against ``target_stats``, the whole target's statistics), in the order of ``jobs``.
    ``steps=0`` just renders."""
    objective = BatchObjective(device, target, structures, jobs, config, frozen)
    if config.steps <= 0:
        trainer = Trainer(device, None, objective, TrainConfig(steps=0, batch=objective.threads()))
        return objective.results(trainer, target_stats, target)
    train = TrainConfig(steps=config.steps, batch=objective.threads(), optimizer=Adam(lr=config.lr),
                        schedule="cosine", final_lr_ratio=0.05, seed=config.seed)
    trainer = Trainer(device, None, objective, train)
    trainer.train()
    return objective.results(trainer, target_stats, target)


def _render(device, target: np.ndarray, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]],
            config: FitConfig) -> np.ndarray:
    """Every job rendered at the target's size in one dispatch: [jobs, height, width, 3]."""
    objective = BatchObjective(device, target, structures, jobs, config)
    trainer = Trainer(device, None, objective, TrainConfig(steps=0, batch=objective.threads()))
    h, w = target.shape[:2]
    trainer.run_kernel("render", len(jobs) * h * w, objective.uniforms(0))
    return objective._render.to_numpy().view(np.float32)[: len(jobs) * h * w * 3].reshape(len(jobs), h, w, 3)


def screen_jobs(device, target: np.ndarray, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]],
                config: FitConfig) -> np.ndarray:
    """How each job's starting point matches the target, without training: the correlation
    of render and target luminance. Its magnitude judges where edges and phases lie
    whatever a ramp's colours; its sign says whether the colours run the wrong way."""
    renders = _render(device, target, structures, jobs, config).reshape(len(jobs), -1, 3)
    luma = renders.mean(axis=2).astype(np.float64)
    t = target[:, :, :3].mean(axis=2).reshape(-1).astype(np.float64)
    t = t - t.mean()
    luma = luma - luma.mean(axis=1, keepdims=True)
    denom = np.sqrt((luma ** 2).sum(axis=1) * (t ** 2).sum()) + 1e-12
    return np.nan_to_num(luma @ t / denom, nan=0.0)


def render_jobs(device, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]], width: int,
                height: int, *, tile: bool = False, texture: bool = False) -> np.ndarray:
    """Renders every job (structure index, parameters) at any size in one dispatch through
    the fitting kernels: [jobs, height, width, 3]. ``texture``: through the kernels that fit
    with the texture term (the same render; no compile where a fit built them already)."""
    cfg = FitConfig(steps=0, batch=width * height, texture_weight=1.0 if texture else 0.0, tile=tile)
    return _render(device, np.zeros((height, width, 3), np.float32), structures, jobs, cfg)


def render_program(device, program: Node, width: int, height: int, *, tile: bool = False) -> np.ndarray:
    """Renders a fitted program at any size through the fitting kernels (one job)."""
    from bakery.stages.procedural.dsl import flatten
    return render_jobs(device, [program.structure()], [(0, flatten(program))], width, height, tile=tile)[0]
