"""Objective: neural texture compression. Quantised latent grids (trained as a plain
parameter group) plus a texel position encoding feed a decoder MLP that outputs every
channel of a material's texture set; see bakery/stages/ntc/ntc_fit.slang."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from bakery.nn.parameters import PlainParameters
from bakery.nn.texel_objective import TexelObjective

LATENT_BITS = (1, 2, 4, 8)  # bit depths whose UNORM steps are exact in 8-bit textures


@dataclass(frozen=True)
class LatentGridSpec:
    """Two latent levels: grid 0 at ceil(W/scale) x ceil(H/scale), grid 1 at half that."""

    width: int
    height: int
    scale: int
    features0: int
    features1: int
    bits: int = 4
    pe_octaves: int = 3

    def __post_init__(self):
        if self.bits not in LATENT_BITS:
            raise ValueError(f"latent bits must be one of {LATENT_BITS}, got {self.bits}")

    @property
    def levels(self) -> list[tuple[int, int, int]]:
        """(grid width, grid height, features) per level."""
        gw0, gh0 = math.ceil(self.width / self.scale), math.ceil(self.height / self.scale)
        return [(gw0, gh0, self.features0), (max(1, math.ceil(gw0 / 2)), max(1, math.ceil(gh0 / 2)), self.features1)]

    @property
    def n_inputs(self) -> int:
        return self.features0 + self.features1 + 4 * self.pe_octaves

    @property
    def latent_count(self) -> int:
        return sum(w * h * f for w, h, f in self.levels)

    @property
    def latent_bits(self) -> int:
        return self.latent_count * self.bits

    def to_dict(self) -> dict:
        d = asdict(self)
        d["levels"] = [{"width": w, "height": h, "features": f} for w, h, f in self.levels]
        return d


def texel_position_encoding(px: np.ndarray, py: np.ndarray, octaves: int) -> np.ndarray:
    """numpy twin of bk_texel_position_encoding (bakery/stages/ntc/latent_grid.slang)."""
    tri = lambda x: np.abs(2.0 * (x - np.floor(x)) - 1.0)  # noqa: E731
    cols = []
    for k in range(octaves):
        period = float(2 << k)
        ax, ay = (px + 0.5) / period, (py + 0.5) / period
        cols += [tri(ax), tri(ax + 0.25), tri(ay), tri(ay + 0.25)]
    return np.stack(cols, -1)


class LatentTextureFit(TexelObjective):
    def __init__(self, device, image: np.ndarray, grid: LatentGridSpec, *, channel_weights=None,
                 normal_channel: int = -1, latent_lr: float = 2e-2, seed: int = 0):
        super().__init__(device, image, channel_weights)
        if (self.width, self.height) != (grid.width, grid.height):
            raise ValueError("latent grid spec is for another texture size")
        self.grid, self.normal_channel = grid, normal_channel
        rng = np.random.default_rng(seed ^ 0x5EED)
        self.latents = PlainParameters(device, rng.uniform(0.3, 0.7, grid.latent_count), lr=latent_lr, lo=0.0, hi=1.0)

    def slang_source(self) -> str:
        g = self.grid
        return (f"#define BK_CHANNELS {self.channels}\n#define BK_F0 {g.features0}\n#define BK_F1 {g.features1}\n"
                f"#define BK_PE {g.pe_octaves}\n#define BK_LATENT_BITS {g.bits}\n"
                f"#define BK_NORMAL_CHANNEL {self.normal_channel}\n"
                '#include "stages/ntc/ntc_fit.slang"\n')

    def vars(self) -> dict:
        return dict(super().vars(), g_latents=self.latents.params, g_latent_grads=self.latents.grads)

    def param_groups(self) -> list:
        return [self.latents]

    def uniforms(self, step: int, batch: int, seed: int) -> dict:
        (gw0, gh0, _), (gw1, gh1, _) = self.grid.levels
        return dict(super().uniforms(step, batch, seed), gw0=gw0, gh0=gh0, gw1=gw1, gh1=gh1)

    def quantized_latents(self) -> list[np.ndarray]:
        """Per level [grid h, grid w, features] integer codes in 0 .. 2^bits - 1 (uint8)."""
        values = self.latents.download()
        levels, offset = [], 0
        top = (1 << self.grid.bits) - 1
        for w, h, f in self.grid.levels:
            block = values[offset:offset + w * h * f].reshape(h, w, f)
            levels.append(np.round(np.clip(block, 0.0, 1.0) * top).astype(np.uint8))
            offset += w * h * f
        return levels
