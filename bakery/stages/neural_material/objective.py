"""Objective: the layered teacher distilled into an encoder + decoder pair (one
:class:`NetworkStack`, trained end to end) and the bake's device work around it:
encoding texels into latents, rendering the lit plane with teacher or student, and
timing both per shading point. Kernels: material_fit.slang."""

from __future__ import annotations

import time

import numpy as np

from bakery.nn.encodings import IdentityEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.parameters import make_buffer
from bakery.nn.stack import NetworkStack
from bakery.shading.directions import draw_directions
from bakery.shading.layered import LayerConstants, layered_brdf_cos
from bakery.stages.neural_material.material import PARAMS

#: Decoder input encodings of the light/view directions (the stage's ``directions``):
#: "world": wi, wo and the half vector h, all in the geometric tangent frame (9 features);
#: "frame": the same, then dot(n, wi), dot(n, wo), dot(n, h) for a shading normal n the
#: encoder learns in the first three latents (12 features; see :func:`shading_normal`).
DIRECTIONS = ("world", "frame")
DIR_FEATURES_BY_MODE = {"world": 9, "frame": 12}
#: Guard of the learned normal's length: n = v / sqrt(|v|^2 + NORMAL_EPS), v = 2 z[0..2] - 1
#: (BK_NORMAL_EPS in material_fit.slang, NM_NORMAL_EPS in the generated shader).
NORMAL_EPS = 1e-4
#: The decoder predicts log(1 + OUTPUT_GAIN * f) (BK_OUTPUT_GAIN in material_fit.slang).
OUTPUT_GAIN = 64.0
#: Training losses: L2 on the displayed lit plane (the quality measurement's own transform,
#: evaluate.py::display) or on the decoder's log(1 + OUTPUT_GAIN f) output.
LOSSES = ("display", "log")
#: The display loss's factor (BK_DISPLAY_LOSS_SCALE in material_fit.slang).
DISPLAY_LOSS_SCALE = 16.0
IRRADIANCE = np.pi
#: Held-out evaluation directions: a fixed seed no training run uses.
HELD_OUT_SEED = 0x0E7A1
#: The progress display's loss: samples drawn like a training step's, from this seed.
PROBE_SEED, PROBE_SAMPLES = 0x9B0BE, 4096


def dir_features(directions: str) -> int:
    """How many direction features the decoder takes in mode ``directions``."""
    if directions not in DIR_FEATURES_BY_MODE:
        raise ValueError(f"directions must be one of {DIRECTIONS}, got {directions!r}")
    return DIR_FEATURES_BY_MODE[directions]


def shading_normal(z: np.ndarray) -> np.ndarray:
    """numpy twin of ``shading_normal``: the learned normal of "frame" mode from latents z
    [..., N >= 3], n = v / sqrt(|v|^2 + NORMAL_EPS) with v = 2 z[0..2] - 1 (unit but for the
    guard, which keeps it finite and differentiable where v vanishes)."""
    v = 2.0 * np.asarray(z, np.float64)[..., 0:3] - 1.0
    return v / np.sqrt(np.sum(v * v, axis=-1, keepdims=True) + NORMAL_EPS)


def encode_directions(wi: np.ndarray, wo: np.ndarray, latents: np.ndarray | None = None,
                      directions: str = "world") -> np.ndarray:
    """numpy twin of ``decoder_inputs``' direction part: wi, wo, normalize(wi + wo), and in
    "frame" mode dot(n, wi), dot(n, wo), dot(n, h) with n = shading_normal(latents)."""
    dir_features(directions)
    wi, wo = np.asarray(wi, np.float64), np.asarray(wo, np.float64)
    h = wi + wo
    h = h / np.linalg.norm(h, axis=-1, keepdims=True)
    parts = [wi, wo, h]
    if directions == "frame":
        if latents is None:
            raise ValueError('directions="frame" needs the latents (the shading normal is in z[0..2])')
        n = shading_normal(latents)
        parts += [np.sum(n * v, axis=-1, keepdims=True) for v in (wi, wo, h)]
    return np.concatenate(parts, axis=-1)


def display_value(f: np.ndarray) -> np.ndarray:
    """numpy twin of ``display_value``: one channel of BRDF x cos as the lit plane displays it,
    linear below sRGB's knee (negative values included)."""
    r = IRRADIANCE * f
    x = r / (1.0 + r)
    with np.errstate(invalid="ignore"):
        return np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.maximum(x, 0.0031308) ** (1 / 2.4) - 0.055)


def loss_target(f: np.ndarray, loss: str) -> np.ndarray:
    """numpy twin of ``loss_target``: what the loss compares against, from the teacher's f."""
    return display_value(np.maximum(f, 0.0)) if loss == "display" else np.log1p(OUTPUT_GAIN * f)


def training_loss(y: np.ndarray, target: np.ndarray, loss: str) -> float:
    """numpy twin of ``student_loss`` averaged over a batch, from the decoder's outputs y."""
    if loss == "display":
        return float(DISPLAY_LOSS_SCALE * np.mean((display_value(np.expm1(y) / OUTPUT_GAIN) - target) ** 2))
    return float(np.mean((y - target) ** 2))


def loss_probe(params: np.ndarray, layers: LayerConstants, stack: NetworkStack, loss: str, *,
               samples: int = PROBE_SAMPLES):
    """``probe(network params) -> loss``: the training loss of the student on a fixed batch
    drawn as a step draws it (seed :data:`PROBE_SEED`), on the CPU. The teacher's targets
    are computed once, so a progress display costs one parameter readback per call."""
    texel, wi, wo = training_batch(params, layers, PROBE_SEED, 0, samples)
    m = params.reshape(-1, PARAMS)[texel].astype(np.float64)
    target = loss_target(layered_brdf_cos(m[:, 0:3], m[:, 3:6], m[:, 6], m[:, 7], layers, wi, wo), loss)
    directions = stack_directions(stack)
    return lambda weights: training_loss(student_forward(stack, weights, m, wi, wo, directions), target, loss)


def held_out_directions(count: int = 8) -> np.ndarray:
    """[count, 2, 3] (wi, wo) pairs: half at random over the hemisphere (above 10 degrees
    elevation), half near the mirror direction, where highlights are."""
    k = count // 2
    wi = draw_directions(HELD_OUT_SEED, count, stream=0, min_cos=0.17)
    wo = draw_directions(HELD_OUT_SEED, count, stream=1, min_cos=0.17)
    jitter = draw_directions(HELD_OUT_SEED, count, stream=2, min_cos=0.995)
    mirror = np.concatenate([-wo[k:, :2], wo[k:, 2:]], axis=-1)
    wi[k:] = mirror + jitter[k:] * np.array([1.0, 1.0, 0.0])
    wi[k:] = wi[k:] / np.linalg.norm(wi[k:], axis=-1, keepdims=True)
    return np.stack([wi, wo], axis=1)


def make_stack(latents: int, hidden: int, layers: int, encoder_hidden: int, directions: str) -> NetworkStack:
    """Encoder: material parameters -> latents in [0, 1] (sigmoid). Decoder ("Network",
    the bundle's one shipped network): latents + encoded directions (``directions`` mode)
    -> log(1 + OUTPUT_GAIN f)."""
    if directions == "frame" and latents < 3:
        raise ValueError('directions="frame" needs at least 3 latents (the shading normal)')
    encoder = NetworkSpec(IdentityEncoding(PARAMS), (encoder_hidden,) * 2, latents, "relu", "sigmoid")
    decoder = NetworkSpec(IdentityEncoding(latents + dir_features(directions)), (hidden,) * layers, 3, "relu",
                          "identity")
    return NetworkStack((("Encoder", encoder), ("Network", decoder)))


def material_uniforms(texels: int, layers: LayerConstants, step: int, batch: int, seed: int, *,
                      wi=(0.0, 0.0, 1.0), wo=(0.0, 0.0, 1.0)) -> dict:
    """``MaterialUniforms`` (material_common.slang) of one step or one render."""
    return {"texels": texels, "batch": batch, "seed": seed & 0xFFFFFFFF, "step": step,
            "grad_scale": 1.0 / batch, "layers": layers.uniforms(),
            "wi": [float(v) for v in wi], "wo": [float(v) for v in wo]}


class MaterialDistillation:
    """Objective for :class:`~bakery.nn.trainer.Trainer` over one material level."""

    def __init__(self, device, params: np.ndarray, latents: int, layers: LayerConstants, loss: str,
                 directions: str):
        dir_features(directions)
        self.device, self.latents, self.layers, self.loss = device, latents, layers, loss
        self.directions = directions
        self._material = None
        self._latents = make_buffer(device, np.zeros(latents, np.float32))
        self._output = make_buffer(device, np.zeros(1, np.float32))
        self.bind_material(params)

    # -- Objective protocol -------------------------------------------------------------
    def slang_source(self) -> str:
        return (f'#define BK_LATENTS {self.latents}\n#define BK_DISPLAY_LOSS {int(self.loss == "display")}\n'
                f'#define BK_FRAME_FEATURES {int(self.directions == "frame")}\n'
                '#include "stages/neural_material/material_fit.slang"\n')

    def vars(self) -> dict:
        return {"g_material": self._material, "g_latents": self._latents, "g_output": self._output}

    def uniforms(self, step: int, batch: int, seed: int, *, wi=(0.0, 0.0, 1.0), wo=(0.0, 0.0, 1.0)) -> dict:
        return material_uniforms(self.texels, self.layers, step, batch, seed, wi=wi, wo=wo)

    def param_groups(self) -> list:
        return []

    # -- bake work ----------------------------------------------------------------------
    def bind_material(self, params: np.ndarray) -> None:
        """Makes ``params`` [H, W, 8] the level the kernels read."""
        self.shape = params.shape[:2]
        self.texels = int(params.shape[0] * params.shape[1])
        self._material = make_buffer(self.device, np.ascontiguousarray(params, np.float32).reshape(-1))

    def _ensure_output(self, count: int) -> None:
        if self._output.size < count * 4:
            self._output = make_buffer(self.device, np.zeros(count, np.float32))

    def _read(self, count: int) -> np.ndarray:
        return self._output.to_numpy().view(np.float32)[:count].copy()

    def encode(self, trainer) -> np.ndarray:
        """Latents [H, W, N] of the bound level."""
        self._ensure_output(self.texels * self.latents)
        trainer.run_kernel("encode", self.texels, self.uniforms(0, 1, 0))
        return self._read(self.texels * self.latents).reshape(*self.shape, self.latents)

    def bind_latents(self, latents: np.ndarray) -> None:
        """The (dequantised) latents [H, W, N] the student kernels read."""
        self._latents = make_buffer(self.device, np.ascontiguousarray(latents, np.float32).reshape(-1))

    def render(self, trainer, who: str, wi, wo) -> np.ndarray:
        """BRDF x cos [H, W, 3] of every texel under one (wi, wo), by "teacher" or "student"."""
        self._ensure_output(self.texels * 3)
        trainer.run_kernel(f"render_{who}", self.texels, self.uniforms(0, 1, 0, wi=wi, wo=wo))
        return self._read(self.texels * 3).reshape(*self.shape, 3)

    def time_per_point(self, trainer, who: str, points: int, dispatches: tuple[int, int] = (2, 10),
                       repeats: int = 3) -> tuple[float, str]:
        """(seconds per shading point, method) of the teacher or the decoder ("teacher" /
        "decoder") over ``points`` points per dispatch.

        Each measurement is one command buffer, recorded beforehand, of n back-to-back
        dispatches; it is timed by GPU timestamps written at its start and end where the
        device has them, else by the wall time of submit + wait. The figure is the slope
        between n = ``dispatches[0]`` and ``dispatches[1]`` (median of ``repeats`` runs
        each), so the fixed cost of a submission, its wait and the timestamps cancels and
        only the cost that grows with the shading points remains.
        """
        import slangpy as spy

        self._ensure_output(points)
        u = self.uniforms(0, points, 0)
        dev = self.device.spy
        try:
            pool = dev.create_query_pool(type=spy.QueryType.timestamp, count=2)
        except Exception:  # noqa: BLE001 - a device without timestamp queries: wall time
            pool = None

        def buffer(n: int):
            enc = dev.create_command_encoder()
            if pool is not None:
                enc.write_timestamp(pool, 0)
            for _ in range(n):
                trainer.record_kernel(enc, f"time_{who}", points, u)
            if pool is not None:
                enc.write_timestamp(pool, 1)
            return enc.finish()

        def seconds(n: int) -> float:
            samples = []
            for _ in range(repeats):
                commands = buffer(n)
                start = time.perf_counter()
                dev.submit_command_buffer(commands)
                dev.wait_for_idle()
                wall = time.perf_counter() - start
                if pool is not None:
                    t0, t1 = pool.get_timestamp_results(0, 2)
                    samples.append(float(t1 - t0))
                else:
                    samples.append(wall)
            return float(np.median(samples))

        seconds(1)  # warm-up: pipelines created, buffers resident
        lo, hi = dispatches
        slope = (seconds(hi) - seconds(lo)) / ((hi - lo) * points)
        method = (f"{'GPU timestamps' if pool is not None else 'wall time of submit + wait'} around one "
                  f"command buffer of n dispatches of {points} points; slope between n = {lo} and {hi}, "
                  f"median of {repeats}")
        return slope, method

    def speed_against_teacher(self, trainer, points: int, rounds: int = 5, dispatches: tuple[int, int] = (2, 10),
                              repeats: int = 3) -> dict:
        """Teacher and decoder time per point, measured alternately ``rounds`` times (each
        by :meth:`time_per_point`): the medians of each, and the speed-up as the median of
        each round's ratio, so a clock or cache state that drifts during the measurement
        (one H200 call timed the same decoder at 0.036 and 0.136 ns/point) moves both
        figures of a round alike instead of one figure alone."""
        times = {"teacher": [], "decoder": []}
        for r in range(rounds):  # the order alternates too, so a steady drift favours neither
            for who in (("teacher", "decoder") if r % 2 == 0 else ("decoder", "teacher")):
                t, method = self.time_per_point(trainer, who, points, dispatches, repeats)
                times[who].append(t)
        teacher, decoder = times["teacher"], times["decoder"]
        ratios = [t / d for t, d in zip(teacher, decoder) if t > 0 and d > 0]
        return {"points": points, "teacher_ns_per_point": float(np.median(teacher)) * 1e9,
                "decoder_ns_per_point": float(np.median(decoder)) * 1e9,
                "speedup": float(np.median(ratios)) if ratios else None,
                "method": f"{method}; teacher and decoder alternately (order swapped each round), {rounds} "
                          "rounds: medians, and the median of the rounds' ratios"}


def training_batch(params: np.ndarray, layers: LayerConstants, seed: int, step: int, batch: int):
    """numpy twin of ``train_step``'s draws: (texel index, wi, wo) per thread, so tests
    can recompute a step's loss and gradients on the CPU."""
    from bakery.shading.directions import draw_unit2, hash3, hemisphere_cosine, hemisphere_uniform

    flat = params.reshape(-1, PARAMS).astype(np.float64)
    idx = np.arange(batch, dtype=np.uint32)
    steps = np.full(batch, step, np.uint32)
    texel = (hash3(np.uint32(seed & 0xFFFFFFFF), steps, idx) % np.uint32(len(flat))).astype(np.int64)
    wo = hemisphere_uniform(draw_unit2(seed, steps, idx, 1))
    wi = hemisphere_cosine(draw_unit2(seed, steps, idx, 2))
    m = flat[texel]
    kind = idx % 4
    flat_normal = np.tile([0.0, 0.0, 1.0], (batch, 1))
    for k, (rough, n) in ((2, (m[:, 6], m[:, 3:6])), (3, (np.full(batch, layers.coat_roughness), flat_normal))):
        sel = kind == k
        r = np.maximum(rough[sel], 0.02)
        a, u = r * r, draw_unit2(seed, steps[sel], idx[sel], 3).astype(np.float64)
        nn = n[sel] / np.linalg.norm(n[sel], axis=-1, keepdims=True)
        tan2 = a * a * u[:, 0] / np.maximum(1.0 - u[:, 0], 1e-6)
        cos_t = 1.0 / np.sqrt(1.0 + tan2)
        sin_t = np.sqrt(np.maximum(0.0, 1.0 - cos_t ** 2))
        phi = 2.0 * np.pi * u[:, 1]
        t = np.array([1.0, 0.0, 0.0]) - nn * nn[:, :1]
        t /= np.linalg.norm(t, axis=-1, keepdims=True)
        b = np.cross(nn, t)
        h = (sin_t * np.cos(phi))[:, None] * t + (sin_t * np.sin(phi))[:, None] * b + cos_t[:, None] * nn
        s = 2.0 * np.sum(wo[sel] * h, -1, keepdims=True) * h - wo[sel]
        ok = s[:, 2] > 1e-3
        w = wi[sel]
        w[ok] = s[ok]
        wi[sel] = w
    return texel, wi, wo


def decoder_forward(spec: NetworkSpec, params: np.ndarray, z: np.ndarray, wi, wo, directions: str) -> np.ndarray:
    """numpy reference of the decoder alone: log(1 + OUTPUT_GAIN f) from latents z."""
    return spec.forward(params, np.concatenate([z, encode_directions(wi, wo, z, directions)], -1))


def student_forward(stack: NetworkStack, params: np.ndarray, material: np.ndarray, wi, wo,
                    directions: str | None = None) -> np.ndarray:
    """numpy reference of the student: log(1 + OUTPUT_GAIN f) predicted for rows of material
    params. ``directions`` defaults to the mode the stack's decoder input width implies."""
    p = stack.unstack(params)
    if directions is None:
        directions = stack_directions(stack)
    z = stack["Encoder"].forward(p["Encoder"], material)
    return decoder_forward(stack["Network"], p["Network"], z, wi, wo, directions)


def stack_directions(stack: NetworkStack) -> str:
    """The ``directions`` mode a stack from :func:`make_stack` was made for."""
    extra = stack["Network"].n_inputs - stack["Encoder"].n_outputs
    modes = [m for m, k in DIR_FEATURES_BY_MODE.items() if k == extra]
    if len(modes) != 1:
        raise ValueError(f"a decoder with {extra} inputs beyond the latents matches no directions mode")
    return modes[0]
