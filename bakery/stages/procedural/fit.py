"""Fitting the continuous parameters of many candidate programs in one go.

Every (structure, restart) pair is a job with its own parameter slots in one
:class:`PlainParameters` group. On a GPU every structure is a few instructions for the
fitting interpreter (bytecode.py, interpreter.slang), compiled once per process, so each
training step is one statistics dispatch, one backward dispatch and one Adam dispatch for
all the jobs of a generation, and a new structure costs no compile; on a CPU device the
structures are compiled, up to MODULE_STRUCTURES per module, and differentiated by Slang's
autodiff, since there compiling is cheap and interpreting is not (``interprets``). The
loop is the shared :class:`Trainer`'s; only the backward pass gains the statistics
dispatch in front (see fit.slang). Each job samples its pixels by its own index
(fit.slang), so how jobs are batched does not change any job's result. A fit is scored on
the device beside its render (score_render), so the host reads a few numbers per job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bakery.nn.optimizers import Adam
from bakery.nn.parameters import FIXED_POINT_SCALE, PlainParameters, make_buffer, output_buffer
from bakery.nn.trainer import GROUP, TrainConfig, Trainer
from bakery.stages.procedural import bytecode, texture_stats
from bakery.stages.procedural.codegen import fitting_function
from bakery.stages.procedural.dsl import Node, param_count, param_scales

@dataclass(frozen=True)
class FitConfig:
    steps: int = 200
    batch: int = 4096            # samples per job and step (rounded to a multiple of 64)
    lr: float = 0.02
    pixel_weight: float = 1.0
    texture_weight: float = 1.0
    seed: int = 0
    blur: float = 4.0            # edge footprint (texels) at the first step; 1 from 70% of the steps on
    tile: bool = False           # noise lattices wrap (the target tiles)
    interpret: bool | None = None  # structures run by the interpreter (None: on a GPU; see interprets)


@dataclass
class JobResult:
    structure: int               # index into the batch's structures
    params: np.ndarray           # fitted values in shader units
    mean_colour: np.ndarray      # [3] the render's mean colour (where it is in range)
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


#: A render is scored as no candidate (infinite losses) where a colour passes twice the
#: target's largest (at least MIN_SCORE_BOUND, at most MAX_SCORE_BOUND): score_render
#: (fit.slang) sums each job's statistics and errors in 64-bit fixed point, whose range
#: ends at 2^23, and the bound keeps them in it (statistics up to the bound squared).
MIN_SCORE_BOUND = 16.0
MAX_SCORE_BOUND = 1024.0
#: Fixed-point columns of a job's sums (fit.slang's BK_JOB_STATS): the program's texture
#: statistics, the target's, their weight; score_render's squared error, colour (3) and
#: pixels out of range.
JOB_SUMS = 2 * texture_stats.STATS + 6
#: The most memory the interpreter's fits keep each sample's features in (stats_step's,
#: read again by train_step: 36 bytes a sample; the final preset's batches take ~260 MB);
#: a larger batch evaluates them twice instead.
FEATURE_STORE_BYTES = 1 << 30
#: Pixels one thread of score_render sums before the wave sums (fit.slang's BK_SCORE_PIXELS).
SCORE_PIXELS = 16

#: Structures one compiled fitting module holds at most: the driver's compile time grows
#: faster than a module's size, and each module also costs its includes' compile again
#: (lavapipe: 1.3 s for 8 structures, 4.8 s for 24).
MODULE_STRUCTURES = 12


def interprets(device, config: FitConfig) -> bool:
    """Whether a fit runs its structures through the interpreter (interpreter.slang) or
    compiles them (codegen.fitting_function). On a GPU the interpreter: a driver spends seconds
    compiling each module and every generation brings new structures, while the
    interpreter is compiled once per process. On a CPU device compiled code: lavapipe
    compiles a module in about a second and runs it several times faster."""
    return (not device.info.software) if config.interpret is None else bool(config.interpret)


def evaluator_source(structures: Sequence[Node], tile: bool = False, interpret: bool = True) -> str:
    """Slang defining BK_MAXP and ``bk_eval(structure, uv, fw, p)`` for a batch: the
    interpreter's (the same for any structures; with ``bk_gradient``, BK_INTERPRETED) or a
    [Differentiable] switch over the structures compiled (codegen.fitting_function)."""
    if interpret:
        return '#define BK_INTERPRETED 1\n#include "stages/procedural/interpreter.slang"\n'
    max_params = max(1, max(param_count(s) for s in structures))
    parts = [f"#define BK_MAXP {max_params}\n", '#include "stages/procedural/primitives.slang"\n']
    for i, s in enumerate(structures):
        parts.append(fitting_function(s, f"bk_program_{i}", max_params, tile=tile))
    cases = "".join(f"    case {i}: return bk_program_{i}(uv, fw, p);\n" for i in range(len(structures)))
    parts.append(f"[Differentiable]\nfloat3 bk_eval(no_diff uint s, no_diff float2 uv, no_diff float2 fw, float p[{max_params}])\n{{\n"
                 f"    switch (s)\n    {{\n{cases}    default: return float3(0.0, 0.0, 0.0);\n    }}\n}}\n")
    return "".join(parts)


def fit_source(structures: Sequence[Node], texture: bool = True, tile: bool = False, interpret: bool = True) -> str:
    """The fitting kernels of a batch: fit.slang's losses over its evaluator
    (evaluator_source). ``texture`` False compiles the pixel loss alone."""
    return (f"#define BK_TEXTURE {int(texture)}\n" + evaluator_source(structures, tile, interpret)
            + '#include "stages/procedural/fit.slang"\n')


class BatchObjective:
    """The Trainer's objective for one batch of jobs (see fit.slang for the kernels);
    ``channels``: what its render buffer holds per pixel (3, or 1 for field reads)."""

    def __init__(self, device, target: np.ndarray, structures: Sequence[Node],
                 jobs: Sequence[tuple[int, np.ndarray]], config: FitConfig, frozen: Sequence[np.ndarray] | None = None,
                 channels: int = 3):
        self.device, self.structures, self.config, self.channels = device, list(structures), config, channels
        self.height, self.width = target.shape[:2]
        if not np.isfinite(target[:, :, :3]).all():
            raise ValueError("the target holds values that are not finite")
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
        self.interpret = interprets(device, config)
        self.features_stored = False
        self._program = {}
        if self.interpret:
            code, rows, scales = bytecode.pack(self.structures, tile=config.tile)
            # stats_step's features per sample, read by train_step (fit.slang), float32,
            # where they fit FEATURE_STORE_BYTES (else train_step evaluates them again)
            features = self.threads() * texture_stats.FEATURES * 4 if config.steps > 0 and config.texture_weight > 0 else 0
            self.features_stored = 0 < features <= FEATURE_STORE_BYTES
            features = features if self.features_stored else 4
            self._program = {"g_code": make_buffer(device, code.reshape(-1)),
                             "g_structures": make_buffer(device, rows.reshape(-1)), "g_scales": make_buffer(device, scales),
                             "g_features": output_buffer(device, features)}
        self.stats = make_buffer(device, np.zeros(len(table) * JOB_SUMS, np.uint64))
        # score_render's bounds: the colour past which a render is no candidate, and the
        # scale of squared errors, the largest power of two that keeps their mean below
        # 2^22 with every colour at that bound.
        reach = float(np.abs(target[:, :, :3]).max(initial=0.0))
        self.score_bound = min(MAX_SCORE_BOUND, max(MIN_SCORE_BOUND, 2.0 * reach))
        self.error_scale = float(2.0 ** np.floor(np.log2(2.0 ** 22 / (self.score_bound + reach) ** 2)))
        # stats_step sums a batch's features and their products: each sample weighs 1
        # unless a batch of colours at the bound could pass 2^22, a power of two below
        # that then (exact to undo; the presets' batches all weigh 1).
        over = self.batch * self.score_bound ** 2 / 2.0 ** 22
        self.stats_weight = float(2.0 ** -max(0, int(np.ceil(np.log2(over)))))
        self._render = output_buffer(device, len(table) * n * channels * 4)  # float32, every pixel written
        self._source: str | None = None

    def slang_source(self) -> str:
        if self._source is None:  # built once: the prepass asks for it every step
            self._source = fit_source(self.structures, self.config.texture_weight > 0.0, self.config.tile,
                                      self.interpret)
        return self._source

    def vars(self) -> dict:
        return {"g_plain_params": self.group.params, "g_plain_grads": self.group.grads, "g_target": self._target,
                "g_jobs": self._jobs, "g_frozen": self._frozen, "g_stats": self.stats,
                "g_render": self._render, **self._program}

    def uniforms(self, step: int, batch: int = 0, seed: int = 0) -> dict:
        c = self.config
        return {"jobs": len(self.jobs), "batch": self.batch, "width": self.width, "height": self.height,
                "seed": c.seed & 0xFFFFFFFF, "step": step, "pixel_weight": c.pixel_weight,
                "texture_weight": c.texture_weight, "blur": blur_at(step, c.steps, c.blur), "channels": self.channels,
                "error_scale": self.error_scale, "score_bound": self.score_bound,
                "stats_weight": self.stats_weight, "stats_unweight": 1.0 / self.stats_weight,
                "features_stored": int(self.features_stored)}

    def param_groups(self) -> list:
        return [self.group]

    def record_prepass(self, encoder, step: int, seed: int) -> None:
        """The trainer's hook before each backward: refresh the renders' texture statistics
        (the texture term's gradient reads them) every step."""
        if self.config.texture_weight > 0.0:
            encoder.clear_buffer(self.stats)
            self.device.kernel(self.slang_source(), "stats_step").dispatch(
                [self.threads(), 1, 1], vars=self.vars(), command_encoder=encoder, u=self.uniforms(step))

    def threads(self) -> int:
        return len(self.jobs) * self.batch

    def results(self, trainer: Trainer, target_stats: np.ndarray) -> list[JobResult]:
        """Each job's fitted values and losses, scored on the device (score_render) in the
        submission that renders them: reading every render back and computing its
        statistics on the host was most of a search's own work."""
        n, jobs = self.width * self.height, len(self.jobs)
        uniforms = self.uniforms(self.config.steps)

        def record(encoder):
            trainer.record_kernel(encoder, "render", jobs * n, uniforms)
            encoder.clear_buffer(self.stats)
            waves = -(-n // (GROUP * SCORE_PIXELS))
            trainer.record_kernel(encoder, "score_render", jobs * waves * GROUP, uniforms)

        self.device.submit(record)
        self.device.wait()
        sums = self.stats.to_numpy().view(np.int64).reshape(jobs, JOB_SUMS) / FIXED_POINT_SCALE
        stats_end = texture_stats.STATS
        weight, error, colour, out_of_range = (sums[:, 2 * stats_end], sums[:, 2 * stats_end + 1],
                                               sums[:, 2 * stats_end + 2:2 * stats_end + 5], sums[:, 2 * stats_end + 5])
        statistics = sums[:, :stats_end] / np.maximum(weight, 1e-30)[:, None]
        values = self.group.download().astype(np.float64)
        out = []
        for i, (s, offset, count, _) in enumerate(self.jobs):
            ok = out_of_range[i] == 0.0
            mse = float(error[i] / self.error_scale) if ok else float("inf")
            tex = float(np.sum((statistics[i] - target_stats) ** 2)) if ok else float("inf")
            out.append(JobResult(s, values[offset:offset + count] * self.scales[s], colour[i].copy(), mse, tex))
        return out


def by_module(structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]], size: int):
    """The jobs split by module (``size`` structures each, in order): per module its
    structures, the indices of its jobs in ``jobs``, and those jobs with the structure
    index counted within the module."""
    out = []
    for first in range(0, max(1, len(structures)), max(1, size)):
        members = [i for i, (s, _) in enumerate(jobs) if first <= s < first + size]
        if members:
            out.append((list(structures[first:first + size]), members,
                        [(jobs[i][0] - first, jobs[i][1]) for i in members]))
    return out


def _modules(device, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]], config: FitConfig):
    """by_module with the module size of the fitting form: all at once when interpreting."""
    return by_module(structures, jobs, len(structures) if interprets(device, config) else MODULE_STRUCTURES)


def fit_jobs(device, target: np.ndarray, target_stats: np.ndarray, structures: Sequence[Node],
             jobs: Sequence[tuple[int, np.ndarray]], config: FitConfig,
             frozen: Sequence[np.ndarray] | None = None) -> list[JobResult]:
    """Fits every job (structure index, initial parameters in shader units) by Adam, one
    dispatch per step for all the jobs of a module (all of them when interpreting);
    ``frozen`` (per job, per slot) holds slots at their value. Returns each job's fitted
    parameters, mean colour and losses (the texture loss against ``target_stats``, the whole
    target's statistics), in the order of ``jobs``. ``steps=0`` just renders."""
    out: list[JobResult | None] = [None] * len(jobs)
    for module, members, local in _modules(device, structures, jobs, config):
        held = [frozen[i] for i in members] if frozen else None
        for i, r in zip(members, _fit_module(device, target, target_stats, module, local, config, held)):
            out[i] = JobResult(jobs[i][0], r.params, r.mean_colour, r.pixel_mse, r.texture_loss)
    return out


def _fit_module(device, target: np.ndarray, target_stats: np.ndarray, structures: Sequence[Node],
                jobs: Sequence[tuple[int, np.ndarray]], config: FitConfig,
                frozen: Sequence[np.ndarray] | None = None) -> list[JobResult]:
    """fit_jobs for the jobs of one module."""
    objective = BatchObjective(device, target, structures, jobs, config, frozen)
    if config.steps <= 0:
        trainer = Trainer(device, None, objective, TrainConfig(steps=0, batch=objective.threads()))
        return objective.results(trainer, target_stats)
    train = TrainConfig(steps=config.steps, batch=objective.threads(), optimizer=Adam(lr=config.lr),
                        schedule="cosine", final_lr_ratio=0.05, seed=config.seed)
    trainer = Trainer(device, None, objective, train)
    trainer.train()
    return objective.results(trainer, target_stats)


def _render(device, target: np.ndarray, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]],
            config: FitConfig, channels: int = 3) -> np.ndarray:
    """Every job rendered at the target's size, one dispatch per module: [jobs, height,
    width, channels] (1: the red channel alone, a third of the read-back)."""
    h, w = target.shape[:2]
    modules = _modules(device, structures, jobs, config)
    out = None if len(modules) == 1 else np.empty((len(jobs), h, w, channels), np.float32)
    for module, members, local in modules:
        objective = BatchObjective(device, target, module, local, config, channels=channels)
        trainer = Trainer(device, None, objective, TrainConfig(steps=0, batch=objective.threads()))
        trainer.run_kernel("render", len(local) * h * w, objective.uniforms(0))
        renders = objective._render.to_numpy().view(np.float32)[: len(local) * h * w * channels].reshape(
            len(local), h, w, channels)
        if out is None:  # one module: its read-back array is the answer
            return renders
        out[members] = renders
    return out


def screen_jobs(device, target: np.ndarray, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]],
                config: FitConfig) -> np.ndarray:
    """How each job's starting point matches the target, without training: the correlation
    of render and target luminance. Its magnitude judges where edges and phases lie
    whatever a ramp's colours; its sign says whether the colours run the wrong way. Uses
    the fitting kernels, so it costs no compile."""
    renders = _render(device, target, structures, jobs, config).reshape(len(jobs), -1, 3)
    luma = renders.mean(axis=2).astype(np.float64)
    t = target[:, :, :3].mean(axis=2).reshape(-1).astype(np.float64)
    t = t - t.mean()
    luma = luma - luma.mean(axis=1, keepdims=True)
    denom = np.sqrt((luma ** 2).sum(axis=1) * (t ** 2).sum()) + 1e-12
    return np.nan_to_num(luma @ t / denom, nan=0.0)


def render_jobs(device, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]], width: int,
                height: int, *, tile: bool = False, texture: bool = False, interpret: bool | None = None,
                channels: int = 3) -> np.ndarray:
    """Renders every job (structure index, parameters) at any size through the fitting
    kernels: [jobs, height, width, channels] (``channels`` 1: red alone, for fields read
    through a grey ramp). ``texture``: through the kernels that fit with the texture term
    (the same render; no compile where a fit built them already)."""
    cfg = FitConfig(steps=0, batch=width * height, texture_weight=1.0 if texture else 0.0, tile=tile,
                    interpret=interpret)
    return _render(device, np.zeros((height, width, 3), np.float32), structures, jobs, cfg, channels)


def render_program(device, program: Node, width: int, height: int, *, tile: bool = False,
                   interpret: bool | None = None) -> np.ndarray:
    """Renders a fitted program at any size through the fitting kernels (one job)."""
    from bakery.stages.procedural.dsl import flatten
    return render_jobs(device, [program.structure()], [(0, flatten(program))], width, height, tile=tile,
                       interpret=interpret)[0]
