"""Objective of stage ``mipmap``: train mip levels >= 1 so their render matches the
area-averaged render of level 0 (kernels in mip_fit.slang).

The normal and roughness texels of every level are two :class:`PlainParameters` groups
(all levels packed together), so one ``train_step`` dispatch trains the whole chain.
They hold moves away from the starting filter in units that suit each texel: the normal
offset is scaled by the starting lobe's alpha (a glossy texel moves a fraction of its
narrow lobe per step instead of sparkling from noisy gradients), the roughness changes
by a log-factor (relative steps).
Each step first renders the step's reference (``record_prepass``: level 0 for ``pairs``
fresh light/view pairs, then 2x2 reductions down the chain). The same kernels, run on
a fixed held-out set of pairs that training never draws, measure any candidate chain.
"""

from __future__ import annotations

import numpy as np

from bakery import phases
from bakery.nn.parameters import PlainParameters, make_buffer
from bakery.stages.mipmap.chain import MipChain
from bakery.stages.mipmap.filters import filter_level
from bakery.stages.mipmap.material import MipMaterial

GROUP = 64
#: Held-out pairs come from this seed and hash streams 2/3; training draws streams 0/1.
HELD_OUT_SEED = 0x4E1D0
HELD_OUT_STREAM = 2
#: Directions are drawn on the cap z >= MIN_COS (about 87 degrees from the zenith at most).
MIN_COS = 0.05
#: One texel's gradient per step is clipped here, far inside the fixed-point range.
GRAD_CLIP = 1.0e3
#: Starting-filter selection draws training-stream pairs at step numbers training never
#: reaches (steps are < 2^30), SELECT_PAIRS_PER_BATCH x pairs of them.
SELECT_STEP = 1 << 30
SELECT_PAIRS_PER_BATCH = 8
#: Choices of ``init``: a filter for every texel, or per texel the best of them.
STARTS = ("best", "box", "toksvig", "vmf")
#: Floor of a texel's normal step unit (its starting alpha), so a mirror-like texel still moves.
MIN_NORMAL_SCALE = 0.02
MIN_ROUGHNESS = 0.02
#: Light and view of the rendered previews and FLIP: near a mirror pair, so glossy
#: highlights (what box filtering loses) show.
PREVIEW_WI = (0.45, 0.25, 0.857)
PREVIEW_WO = (-0.35, -0.15, 0.925)


def _threads(n: int) -> int:
    return (n + GROUP - 1) // GROUP * GROUP


def tonemap(linear: np.ndarray) -> np.ndarray:
    """Reinhard x / (1 + x): the space losses, RMSE, PSNR and FLIP are taken in."""
    return linear / (1.0 + linear)


class MipFit:
    """Buffers, kernels and evaluation of one material's mip chain on one device."""

    def __init__(self, device, material: MipMaterial, chain: MipChain, *, pairs: int, light: float,
                 lr: float, roughness_lr: float, albedo_lr: float = 0.0, init: str = "best", seed: int = 0):
        self.device, self.material, self.chain = device, material, chain
        self._baselines: dict[str, tuple] = {}
        self.pairs, self.light = int(pairs), float(light)
        levels = range(1, chain.deepest + 1)
        if init not in STARTS:
            raise ValueError(f"unknown start {init!r} (known: {', '.join(STARTS)})")
        start = [filter_level(material.normal, material.roughness, l, "box" if init == "best" else init)
                 for l in levels]
        self.normal_base = chain.pack([n for n, _ in start])
        self.rough_base = np.clip(chain.pack([r for _, r in start]), MIN_ROUGHNESS, 1.0)
        self.normal_scale = np.maximum(self.rough_base ** 2, MIN_NORMAL_SCALE)
        self.start_choice = [init] * chain.deepest   # the filter each level starts from
        # Trained: the normal's offset in units of normal_scale, the roughness's log-factor.
        self.normals = PlainParameters(device, np.zeros_like(self.normal_base), lr=lr,
                                       lo=-1.0 / MIN_NORMAL_SCALE, hi=1.0 / MIN_NORMAL_SCALE)
        self.roughness = PlainParameters(device, np.zeros_like(self.rough_base), lr=roughness_lr,
                                         lo=float(np.log(MIN_ROUGHNESS)), hi=float(-np.log(MIN_ROUGHNESS)))
        self.albedo_mips = chain.pack([_block_mean(material.albedo, l) for l in levels])
        # Albedo trains only when asked (albedo_lr > 0): then the diffuse term can absorb
        # the correlation of colour and slope inside a texel's footprint.
        self.albedo = (PlainParameters(device, self.albedo_mips, lr=albedo_lr, lo=0.0, hi=1.0)
                       if albedo_lr > 0 else None)
        metal_mips = chain.pack([_block_mean(material.metalness, l) for l in levels])
        self._buffers = {
            "g_normal0": make_buffer(device, material.normal.reshape(-1)),
            "g_rough0": make_buffer(device, material.roughness.reshape(-1)),
            "g_albedo0": make_buffer(device, material.albedo.reshape(-1)),
            "g_metal0": make_buffer(device, material.metalness.reshape(-1)),
            "g_albedo_mips": (self.albedo.params if self.albedo is not None
                              else make_buffer(device, self.albedo_mips.reshape(-1))),
            "g_albedo_grads": (self.albedo.grads if self.albedo is not None
                               else make_buffer(device, np.zeros(1, np.uint64))),
            "g_metal_mips": make_buffer(device, metal_mips.reshape(-1)),
            "g_levels": make_buffer(device, chain.level_table()),
            "g_normal_base": make_buffer(device, self.normal_base.reshape(-1)),
            "g_normal_scale": make_buffer(device, self.normal_scale.reshape(-1)),
            "g_rough_base": make_buffer(device, self.rough_base.reshape(-1)),
            "g_normal_map": make_buffer(device, self.normal_base.reshape(-1)),
            "g_rough_map": make_buffer(device, self.rough_base.reshape(-1)),
            "g_ref": make_buffer(device, np.zeros(self.pairs * chain.pyramid * 3, np.float32)),
            "g_out": make_buffer(device, np.zeros(chain.mip_texels * 3, np.float32)),
        }
        source = self.slang_source()
        self._render_reference = device.kernel(source, "render_reference")
        self._reduce = device.kernel(source, "reduce_level")
        self._eval_error = device.kernel(source, "eval_error")
        self._render_mips = device.kernel(source, "render_mips")
        if init == "best":
            self._select_start(seed)

    def _select_start(self, seed: int) -> None:
        """Per level, the classical filter whose roughness renders it best on training-stream
        pairs becomes its start. Where footprints hold bimodal normals a box start sits in a
        narrow-lobe minimum; where they are nearly flat and glossy a Toksvig start is too
        wide; gradient steps from the wrong side do not cross over in a few hundred steps.
        Chosen per level, not per texel: a texel's error over a few dozen pairs is too noisy
        to choose by (glossy highlights are rarely hit), a level's is not."""
        kinds = ("box", "toksvig", "vmf")
        candidates = {k: self.baseline(k) for k in kinds}
        sse = self.texel_sse(candidates, SELECT_PAIRS_PER_BATCH * self.pairs, seed=seed, stream=0,
                             step=SELECT_STEP)
        c = self.chain
        offs = [o - c.texels0 for o in c.offsets[1:]]
        rough = np.empty_like(self.rough_base)
        self.start_choice = []
        for level in range(1, c.deepest + 1):
            part = slice(offs[level - 1], offs[level])
            best = min(kinds, key=lambda k: sse[k][part].sum())
            rough[part] = candidates[best][1][part]
            self.start_choice.append(best)
        self.rough_base = np.clip(rough, MIN_ROUGHNESS, 1.0).astype(np.float32)
        self.normal_scale = np.maximum(self.rough_base ** 2, MIN_NORMAL_SCALE)
        self._buffers["g_rough_base"].copy_from_numpy(self.rough_base.reshape(-1))
        self._buffers["g_normal_scale"].copy_from_numpy(self.normal_scale.reshape(-1))

    # -- the Trainer's objective protocol ---------------------------------------------
    def slang_source(self) -> str:
        return (f"#define BK_TRAIN_ALBEDO {int(self.albedo is not None)}\n"
                '#include "stages/mipmap/mip_fit.slang"\n')

    def vars(self, normals=None, roughness=None, albedo=None) -> dict:
        """Bindings; ``normals``/``roughness``/``albedo`` buffers replace the maps that
        evaluation and previews read (a chain to measure)."""
        maps = {k: v for k, v in (("g_normal_map", normals), ("g_rough_map", roughness),
                                  ("g_albedo_mips", albedo)) if v is not None}
        return dict(self._buffers, **maps,
                    g_normal_params=self.normals.params, g_normal_grads=self.normals.grads,
                    g_rough_params=self.roughness.params, g_rough_grads=self.roughness.grads)

    def uniforms(self, step: int, batch: int, seed: int, *, stream: int = 0, level: int = 0,
                 pair: tuple | None = None, pair_base: int = 0) -> dict:
        c = self.chain
        return {"pairs": self.pairs, "levels": c.deepest, "texels0": c.texels0, "pyramid": c.pyramid,
                "mip_texels": c.mip_texels, "seed": seed & 0xFFFFFFFF, "step": step, "level": level,
                "fixed_pair": int(pair is not None), "pair_base": pair_base, "stream": stream,
                "light": self.light, "min_cos": MIN_COS,
                "grad_scale": 1.0 / self.pairs, "grad_clip": GRAD_CLIP,
                "wi": _unit(pair[0]) if pair else [0.0, 0.0, 1.0], "wo": _unit(pair[1]) if pair else [0.0, 0.0, 1.0]}

    def param_groups(self) -> list:
        return [self.normals, self.roughness] + ([self.albedo] if self.albedo is not None else [])

    @property
    def batch(self) -> int:
        """Threads of one train_step: every mip texel of the chain."""
        return self.chain.mip_texels

    def record_prepass(self, encoder, step: int, seed: int, *, stream: int = 0, pair=None,
                       pair_base: int = 0) -> None:
        """The step's reference: level 0 rendered for each pair, then reduced level by level."""
        c = self.chain
        self._render_reference.dispatch([_threads(self.pairs * c.texels0), 1, 1], vars=self.vars(),
                                        command_encoder=encoder,
                                        u=self.uniforms(step, 0, seed, stream=stream, pair=pair, pair_base=pair_base))
        for level in range(1, c.deepest + 1):
            self._reduce.dispatch([_threads(self.pairs * c.count(level)), 1, 1], vars=self.vars(),
                                  command_encoder=encoder,
                                  u=self.uniforms(step, 0, seed, stream=stream, level=level, pair=pair,
                                                  pair_base=pair_base))

    # -- results ------------------------------------------------------------------------
    def trained(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(unit normals [mip texels, 3], roughness [mip texels, 1], linear albedo
        [mip texels, 3]) after training; albedo is the box filter's unless it trained."""
        offset = self.normals.download().reshape(-1, 3).astype(np.float64)
        n = self.normal_base + self.normal_scale * offset
        n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-8)
        factor = np.exp(self.roughness.download().reshape(-1, 1).astype(np.float64))
        rough = np.clip(self.rough_base * factor, MIN_ROUGHNESS, 1.0)
        albedo = self.albedo.download().reshape(-1, 3) if self.albedo is not None else self.albedo_mips
        return n.astype(np.float32), rough.astype(np.float32), albedo

    def baseline(self, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A classical filter's chain (box-filtered albedo), packed like :meth:`trained`;
        filtered once (choosing the start filters them all, the metrics again)."""
        if kind not in self._baselines:
            m, levels = self.material, range(1, self.chain.deepest + 1)
            with phases.time("baselines"):
                out = [filter_level(m.normal, m.roughness, l, kind) for l in levels]
                self._baselines[kind] = (self.chain.pack([n for n, _ in out]), self.chain.pack([r for _, r in out]),
                                         self.albedo_mips)
        return self._baselines[kind]

    def texel_sse(self, chains: dict, count: int, *, seed: int, stream: int, step: int = 0) -> dict:
        """Per mip texel, the squared tone-mapped error (3 channels) summed over ``count``
        pairs (rounded up to whole batches) drawn from (seed, step, stream): {name: [mip texels]}."""
        c, dev = self.chain, self.device
        bound = {name: [make_buffer(dev, x.reshape(-1)) for x in maps] for name, maps in chains.items()}
        sums = {name: make_buffer(dev, np.zeros(c.mip_texels, np.float32)) for name in chains}
        for chunk in range(self.batches(count)):
            def record(enc, chunk=chunk):
                self.record_prepass(enc, step, seed, stream=stream, pair_base=chunk * self.pairs)
                for name, maps in bound.items():
                    self._eval_error.dispatch([_threads(c.mip_texels), 1, 1],
                                              vars=dict(self.vars(*maps), g_out=sums[name]), command_encoder=enc,
                                              u=self.uniforms(step, 0, seed, stream=stream,
                                                              pair_base=chunk * self.pairs))
            dev.submit(record)
        dev.wait()
        return {name: sums[name].to_numpy().view(np.float32)[: c.mip_texels].astype(np.float64) for name in chains}

    def batches(self, count: int) -> int:
        return -(-count // self.pairs)

    def held_out_mse(self, chains: dict, count: int) -> dict:
        """Mean squared tone-mapped error per level >= 1 of each named chain over ``count``
        held-out light/view pairs (a seed and hash streams training never draws):
        {name: [mse of level 1, 2, ...]}."""
        c = self.chain
        sse = self.texel_sse(chains, count, seed=HELD_OUT_SEED, stream=HELD_OUT_STREAM)
        pairs = self.batches(count) * self.pairs
        offs = [o - c.texels0 for o in c.offsets[1:]]
        return {name: [float(e[offs[l - 1]:offs[l]].sum() / (c.count(l) * pairs * 3)) for l in range(1, c.deepest + 1)]
                for name, e in sse.items()}

    def training_loss(self, step: int, seed: int) -> float:
        """The loss training minimises (mean squared tone-mapped error over every mip
        texel) of the chain as trained so far, on the pairs step ``step`` draws: one batch,
        for progress displays. Reads the parameters back; changes nothing training reads
        (the next step renders its own reference)."""
        sse = self.texel_sse({"trained": self.trained()}, self.pairs, seed=seed, stream=0, step=step)["trained"]
        return float(sse.sum() / (self.chain.mip_texels * self.pairs * 3))

    def render(self, chains: dict, pair=(PREVIEW_WI, PREVIEW_WO)) -> tuple[list, dict]:
        """Tone-mapped renders for one light/view pair: (reference per level 1.., {name:
        [render per level 1..]}), each [h, w, 3] in [0, 1] linear display space."""
        c, dev = self.chain, self.device
        dev.submit(lambda enc: self.record_prepass(enc, 0, 0, pair=pair))
        dev.wait()
        ref = self._buffers["g_ref"].to_numpy().view(np.float32)[: c.pyramid * 3].reshape(-1, 3)
        reference = c.unpack(tonemap(ref[c.texels0:]), 3)
        renders = {}
        for name, maps in chains.items():
            out = make_buffer(dev, np.zeros(c.mip_texels * 3, np.float32))
            bound = [make_buffer(dev, x.reshape(-1)) for x in maps]
            dev.submit(lambda enc, bound=bound, out=out: self._render_mips.dispatch(
                [_threads(c.mip_texels), 1, 1], vars=dict(self.vars(*bound), g_out=out), command_encoder=enc,
                u=self.uniforms(0, 0, 0, pair=pair)))
            dev.wait()
            lin = out.to_numpy().view(np.float32)[: c.mip_texels * 3].reshape(-1, 3)
            renders[name] = c.unpack(tonemap(lin), 3)
        return reference, renders


def _unit(v) -> list:
    v = np.asarray(v, np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def _block_mean(image: np.ndarray, level: int) -> np.ndarray:
    h, w, ch = image.shape
    f = 1 << level
    return image.reshape(h // f, f, w // f, f, ch).mean(axis=(1, 3))
