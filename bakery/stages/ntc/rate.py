"""Rate control: pick latent grid resolution and feature count for a bit budget.

Bits counted are everything a runtime must store: latents at their quantised bit depth
and the decoder's weights and biases at fp16. Features come in fours (one RGBA8
texture-array layer each).
"""

from __future__ import annotations

from dataclasses import dataclass

from bakery.errors import UsageError
from bakery.nn.encodings import IdentityEncoding
from bakery.stages.ntc.objective import LatentGridSpec
from bakery.nn.network import NetworkSpec

SCALES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
FEATURES = (4, 8, 12, 16)
DECODER_BITS_PER_PARAM = 16


@dataclass(frozen=True)
class RatePoint:
    grid: LatentGridSpec
    network: NetworkSpec

    @property
    def bits(self) -> int:
        return self.grid.latent_bits + self.network.param_count * DECODER_BITS_PER_PARAM

    @property
    def bpp(self) -> float:
        return self.bits / (self.grid.width * self.grid.height)


def candidates(width: int, height: int, channels: int, *, hidden: int, layers: int, bits: int,
               pe_octaves: int, activation: str = "relu") -> list[RatePoint]:
    """Every configuration, cheapest first."""
    out = []
    for s in SCALES:
        for f in FEATURES:
            g = LatentGridSpec(width, height, s, f, f, bits, pe_octaves)
            net = NetworkSpec(IdentityEncoding(g.n_inputs), (hidden,) * layers, channels, activation)
            out.append(RatePoint(g, net))
    return sorted(out, key=lambda p: (p.bits, -p.grid.features0))


def choose(points: list[RatePoint], bpp: float) -> RatePoint:
    """The richest configuration within ``bpp``."""
    fitting = [p for p in points if p.bpp <= bpp]
    if not fitting:
        low = points[0]
        raise UsageError(f"bpp {bpp:g} is too low for a {low.grid.width}x{low.grid.height} set: the smallest "
                         f"configuration costs {low.bpp:.2f} bpp (decoder {low.network.param_count} fp16 "
                         f"parameters); raise bpp or lower hidden/layers", key="params.bpp")
    return fitting[-1]
