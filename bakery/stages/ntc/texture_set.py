"""The texture-set format of an ``ntc`` bundle: the latent grid pyramid, the colour mips it
serves, and the decoder's inputs. Packing, the CPU decoder, rate control, the generated
shaders and the training objective all read these types; none of them needs the others.

Latent level k is ``max(1, gw >> k) x max(1, gh >> k)`` texels of ``features`` values (the
mip chain of one texture, so BC-stored latents are one DDS with mips). Colour mip L reads
the latent pair (a, a + 1), a = clamp(L - shift, 0, levels - 2) with shift =
floor(log2(scale)): the finest colour mips share latent levels 0 and 1, as RTXNTC does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from bakery.imaging import mip_count, mip_size

LATENT_BITS = (1, 2, 4, 8)   # code widths that tile a 32-bit word exactly
LATENT_MODES = ("packed", "bc")
LOD_INPUT_SCALE = 0.25       # the decoder's last input is LOD * this


@dataclass(frozen=True)
class LatentGridSpec:
    """Size of the colour set, of latent level 0, feature count, code bits, mips."""

    width: int
    height: int
    grid_width: int
    grid_height: int
    features: int
    bits: int = 4
    pe_octaves: int = 3
    mips: bool = True
    mode: str = "packed"

    def __post_init__(self):
        if self.bits not in LATENT_BITS:
            raise ValueError(f"latent bits must be one of {LATENT_BITS}, got {self.bits}")
        if self.mode not in LATENT_MODES:
            raise ValueError(f"latent mode must be one of {LATENT_MODES}, got {self.mode!r}")
        if self.mode == "bc" and self.bits != 4:
            raise ValueError("BC4 latents hold 4 bits per feature texel: use bits=4")
        if self.features < 4 or self.features % 4:
            raise ValueError(f"latent features must be a positive multiple of 4 (the decoder reads them four at "
                             f"a time), got {self.features}")

    # -- colour mips and latent levels -----------------------------------------------------
    @property
    def color_mips(self) -> list[tuple[int, int]]:
        n = mip_count(self.width, self.height) if self.mips else 1
        return [(mip_size(self.width, m), mip_size(self.height, m)) for m in range(n)]

    @property
    def shift(self) -> int:
        """floor(log2(scale)): colour mips up to this one read latent levels 0 and 1."""
        scale = min(self.width / self.grid_width, self.height / self.grid_height)
        return max(0, int(math.floor(math.log2(max(scale, 1.0)))))

    @property
    def levels(self) -> list[tuple[int, int, int]]:
        """(grid width, grid height, features) per latent level (at least two)."""
        want = max(2, len(self.color_mips) - self.shift + 1)
        have = max(2, mip_count(self.grid_width, self.grid_height))
        return [(mip_size(self.grid_width, k), mip_size(self.grid_height, k), self.features)
                for k in range(min(want, have))]

    def latent_pair(self, mip: int) -> int:
        """First latent level a colour mip reads (it also reads a + 1)."""
        return int(np.clip(mip - self.shift, 0, len(self.levels) - 2))

    @property
    def level_offsets(self) -> list[int]:
        """Element offset of each latent level in the flat latent array."""
        out, o = [], 0
        for w, h, f in self.levels:
            out.append(o)
            o += w * h * f
        return out

    @property
    def n_inputs(self) -> int:
        return 2 * self.features + 4 * self.pe_octaves + 1

    @property
    def latent_count(self) -> int:
        return sum(w * h * f for w, h, f in self.levels)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["levels"] = [{"width": w, "height": h, "features": f} for w, h, f in self.levels]
        d["color_mips"] = [{"width": w, "height": h, "latent_level": self.latent_pair(m)}
                           for m, (w, h) in enumerate(self.color_mips)]
        d["n_inputs"] = self.n_inputs
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LatentGridSpec":
        return cls(**{k: d[k] for k in ("width", "height", "grid_width", "grid_height", "features", "bits",
                                         "pe_octaves", "mips", "mode")})


def texel_position_encoding(px: np.ndarray, py: np.ndarray, octaves: int) -> np.ndarray:
    """numpy twin of bk_texel_position_encoding (bakery/stages/ntc/latent_grid.slang)."""
    tri = lambda x: np.abs(2.0 * (x - np.floor(x)) - 1.0)  # noqa: E731
    cols = []
    for k in range(octaves):
        period = float(2 << k)
        ax, ay = (px + 0.5) / period, (py + 0.5) / period
        cols += [tri(ax), tri(ax + 0.25), tri(ay), tri(ay + 0.25)]
    return np.stack(cols, -1) if cols else np.zeros((len(px), 0))
