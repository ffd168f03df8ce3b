"""Objective: neural texture compression. A pyramid of quantised latent grids (trained as
one plain parameter group) plus a texel position encoding and the LOD feed a decoder MLP
that outputs every channel of a material's texture set, at every mip level; see
bakery/stages/ntc/ntc_fit.slang and the grid's layout in ntc/texture_set.py.
"""

from __future__ import annotations

import numpy as np

from bakery.imaging import box_down
from bakery.materials import renormalize_normals
from bakery.nn.parameters import PlainParameters, make_buffer, read_back
from bakery.nn.texel_objective import TexelObjective
from bakery.stages.ntc.texture_set import LOD_INPUT_SCALE, LatentGridSpec

LATENT_SCATTER = ("thread", "staged", "shuffle")  # BK_NTC_SCATTER 0, 1, 2 in ntc_fit.slang


def color_pyramid(image: np.ndarray, count: int, normal_channel: int) -> list[np.ndarray]:
    """Reference mip chain: box filter, normals renormalised on every level."""
    levels = [image.astype(np.float32)]
    for _ in range(count - 1):
        levels.append(renormalize_normals(box_down(levels[-1]), normal_channel).astype(np.float32))
    return levels


class LatentTextureFit(TexelObjective):
    """Trains latents + decoder on every colour mip at once (texels drawn uniformly over
    the whole chain, so mip 0 gets 3/4 of the samples). Packed latents see uniform noise of
    one code step for the first ``noise_steps`` steps, exact rounding after."""

    def __init__(self, device, image: np.ndarray, grid: LatentGridSpec, *, channel_weights=None,
                 normal_channel: int = -1, latent_lr: float = 2e-2, seed: int = 0, noise_steps: int = 0,
                 latent_scatter: str | None = None, line_texels: int = 0, patches: bool = False,
                 lazy_latents: bool = False, touched_cells: bool = False):
        if image.shape[:2] != (grid.height, grid.width):
            raise ValueError("latent grid spec is for another texture size")
        self.grid, self.normal_channel = grid, normal_channel
        self.noise_steps = noise_steps if grid.mode == "packed" else 0
        self.pyramid = color_pyramid(image, len(grid.color_mips), normal_channel)
        stacked = np.concatenate([p.reshape(-1, image.shape[2]) for p in self.pyramid])[:, None, :]
        super().__init__(device, stacked, channel_weights)
        self.width, self.height = grid.width, grid.height
        offsets, o = [], 0
        for (w, h), p in zip(grid.color_mips, self.pyramid):
            offsets.append(o)
            o += w * h
        self.total_texels = o
        mips = [[w, h, off, grid.latent_pair(m)] for m, ((w, h), off) in enumerate(zip(grid.color_mips, offsets))]
        lv = [[w, h, off, 0] for (w, h, _), off in zip(grid.levels, grid.level_offsets)]
        self._mips = make_buffer(device, np.asarray(mips, np.uint32).reshape(-1))
        self._levels = make_buffer(device, np.asarray(lv, np.uint32).reshape(-1))
        rng = np.random.default_rng(seed ^ 0x5EED)
        #: lazy_latents: Adam skips latents whose gradient this step is exactly zero, i.e. no
        #: sample read them (PlainParameters.lazy). touched_cells (lazy only): the training
        #: kernel marks the latent cells it adds to, and the lazy Adam reads only their
        #: gradients (PlainParameters.touch_group): the same updates.
        if touched_cells and not lazy_latents:
            raise ValueError("touched_cells marks cells for lazy latent updates: it needs lazy_latents")
        self.latents = PlainParameters(device, rng.uniform(0.3, 0.7, grid.latent_count), lr=latent_lr, lo=0.0, hi=1.0,
                                       lazy=lazy_latents, touch_group=grid.features if touched_cells else 0)
        # BC mode: decoded-minus-raw of the last block-compression pass (straight-through offset)
        self._delta = make_buffer(device, np.zeros(max(1, grid.latent_count), np.float32))
        #: Training samples in lines of this many consecutive texels of one mip
        #: (ntc_fit.slang BK_NTC_LINES; RTXNTC trains on lines), or 0: independent texels.
        #: Off by default: with lazy updates it cost 0.13 dB at 8 bpp on the 256^2 set
        #: (bench/RESULTS.md).
        if not 0 <= line_texels <= 256:
            raise ValueError(f"line_texels must be 0 (independent texels) or up to 256, got {line_texels}")
        self.line_texels = int(line_texels) if line_texels > 1 else 0
        #: Training samples in patches of texels of one mip, one per workgroup
        #: (ntc_fit.slang BK_NTC_PATCHES): the most coherent layout, whose latent reads and
        #: adds fall on the fewest cells.
        if patches and self.line_texels:
            raise ValueError("patches and line_texels are two sample layouts: choose one")
        self.patches = bool(patches)
        #: How latent gradients leave the kernel (ntc_fit.slang BK_NTC_SCATTER): "staged"
        #: (each warp's in coalesced runs, for a GPU's memory system; per-thread adds where
        #: a workgroup's staging slots would not fit beside the network's), "shuffle" (runs of
        #: lanes on one cell summed by shuffles, one add per run: patches put a row's
        #: texels on shared cells; on the H200's 2048^2 set the training kernel took 345
        #: against 352 us staged; chosen on NVIDIA's 32-lane warps, since 64-lane waves
        #: fall back to per-thread adds), "thread" (each thread its own; on the CPU device
        #: staging was slower, measured with the workgroup-staged design: 128^2 check, 254
        #: against 186 ms/step). All three add the same fixed-point values: the same bits.
        #: None: the device's choice. Read when the trainer compiles the kernels.
        if latent_scatter is None:
            latent_scatter = ("thread" if device.info.software else
                              "shuffle" if patches and getattr(device, "coopvec", False) else "staged")
        if latent_scatter not in LATENT_SCATTER:
            raise ValueError(f"latent_scatter must be one of {LATENT_SCATTER}, got {latent_scatter!r}")
        self.latent_scatter = latent_scatter

    def slang_source(self) -> str:
        g = self.grid
        return (f"#define BK_CHANNELS {self.channels}\n#define BK_F {g.features}\n"
                f"#define BK_PE {g.pe_octaves}\n#define BK_LATENT_BITS {g.bits}\n"
                f"#define BK_LATENT_BC {int(g.mode == 'bc')}\n#define BK_MIPS {len(g.color_mips)}\n"
                f"#define BK_LOD_SCALE {LOD_INPUT_SCALE}\n#define BK_NORMAL_CHANNEL {self.normal_channel}\n"
                f"#define BK_NTC_SCATTER {LATENT_SCATTER.index(self.latent_scatter)}\n"
                f"#define BK_NTC_LINES {self.line_texels}\n#define BK_NTC_PATCHES {int(self.patches)}\n"
                f"#define BK_NTC_TOUCHED {int(self.latents.touch_group > 0)}\n"
                '#include "stages/ntc/ntc_fit.slang"\n')

    def vars(self) -> dict:
        return dict(super().vars(), g_latents=self.latents.params, g_latent_grads=self.latents.grads,
                    g_latent_touched=self.latents.touched,
                    g_latent_delta=self._delta, g_mips=self._mips, g_levels=self._levels)

    def param_groups(self) -> list:
        return [self.latents]

    def uniforms(self, step: int, batch: int, seed: int) -> dict:
        return dict(super().uniforms(step, batch, seed), total_texels=self.total_texels, lod=0,
                    noise=int(step < self.noise_steps), touched=self.latents.touched_half(step))

    def set_block_compression_delta(self, delta: np.ndarray) -> None:
        self._delta.copy_from_numpy(np.ascontiguousarray(delta, np.float32))

    def raw_latents(self) -> np.ndarray:
        return self.latents.download()

    def decode_mip(self, trainer, mip: int) -> np.ndarray:
        """Every texel of colour mip ``mip`` as the decoder reproduces it (raw outputs)."""
        w, h = self.grid.color_mips[mip]
        # noise=0: decodes see the exact rounding, even where training starts with noise.
        trainer.run_kernel("decode", w * h, dict(self.uniforms(0, 1, 0), lod=mip, noise=0))
        count = w * h * self.channels   # the buffer is sized for mip 0: a smaller mip reads its own part
        return read_back(self.device, self._output, 4 * count).view(np.float32).reshape(h, w, self.channels)

    def decode(self, trainer) -> np.ndarray:
        return self.decode_mip(trainer, 0)
