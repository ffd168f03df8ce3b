"""Rate control: pick the latent grid for a budget of GPU-resident bits per texel.

Bits counted are the bytes an engine keeps in GPU memory, times 8: the latent file
(``latents.bin``, packed codes in 32-bit words, or ``latents.dds``, BC4 blocks with the
latent mip chain) plus the decoder's ``weights.bin`` (fp16, with its small header). The texel count is that of
colour mip 0; every latent mip is paid for. The grid's resolution is free (latents are
sampled by UV), so the rate lands within a grid row of the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bakery.errors import UsageError
from bakery.formats import weights as weights_format
from bakery.nn.encodings import IdentityEncoding
from bakery.nn.network import NetworkSpec
from bakery.stages.ntc import bc4
from bakery.stages.ntc.packing import packed_bytes
from bakery.stages.ntc.texture_set import LatentGridSpec

FEATURES = (16, 12, 8, 4)
MIN_SCALE = 2.0          # texels per latent cell: finer grids waste bits on what the MLP could add
MIN_AUTO_FEATURES = 8    # the fewest features the automatic choice takes (fewer: unmeasured)


def latent_bytes(grid: LatentGridSpec) -> int:
    """Bytes of the GPU-resident latent file's payload."""
    if grid.mode == "bc":
        return sum(bc4.bc4_bytes(w, h) * f for w, h, f in grid.levels)
    return packed_bytes(grid)


@dataclass(frozen=True)
class RatePoint:
    grid: LatentGridSpec
    network: NetworkSpec

    @property
    def latent_bits(self) -> int:
        return latent_bytes(self.grid) * 8

    @property
    def decoder_bits(self) -> int:
        return weights_format.layout(self.network, "float16")[1] * 8

    @property
    def bits(self) -> int:
        return self.latent_bits + self.decoder_bits

    @property
    def bpp(self) -> float:
        return self.bits / (self.grid.width * self.grid.height)


def point(width, height, channels, grid_w, grid_h, features, *, hidden, layers, bits, pe_octaves, mips, mode,
          activation="relu") -> RatePoint:
    g = LatentGridSpec(width, height, grid_w, grid_h, features, bits, pe_octaves, mips, mode)
    return RatePoint(g, NetworkSpec(IdentityEncoding(g.n_inputs), (hidden,) * layers, channels, activation))


def _best_grid(width, height, budget_bits, make) -> RatePoint | None:
    """Largest grid within budget: widths within 10% of the texture-aspect estimate, each
    with the tallest grid that fits, so the grid's aspect can differ from the texture's
    (87 x 108 cells for a square 256^2 set at 8 bpp with 16 features)."""
    probe = make(max(1, width // 8), max(1, height // 8))
    per_cell = max(1e-9, probe.latent_bits / max(1, probe.grid.grid_width * probe.grid.grid_height))
    cells = (budget_bits - probe.decoder_bits) / per_cell
    if cells < 1:
        return None
    gw_est = math.sqrt(cells * width / height)
    best = None
    for gw in range(max(1, int(gw_est * 0.9)), min(width, int(gw_est * 1.1) + 2) + 1):
        lo, hi = 1, height           # largest gh that fits, by bisection
        if make(gw, 1).bits > budget_bits:
            continue
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if make(gw, mid).bits <= budget_bits:
                lo = mid
            else:
                hi = mid - 1
        p = make(gw, lo)
        if best is None or p.bits > best.bits:
            best = p
    return best


def grid_scale(p: RatePoint) -> float:
    """Texels of colour mip 0 per latent cell of level 0 (geometric mean of both axes)."""
    g = p.grid
    return math.sqrt(g.width * g.height / (g.grid_width * g.grid_height))


def choose(width: int, height: int, channels: int, bpp: float, *, hidden: int, layers: int, bits: int,
           pe_octaves: int, mips: bool = True, mode: str = "packed", features: int = 0) -> RatePoint:
    """The configuration nearest ``bpp`` from below: the finest grid no finer than
    MIN_SCALE, i.e. the fewest features (at least MIN_AUTO_FEATURES) whose grid is that
    coarse, else the coarsest-scale configuration that fits. On the H200 fewer features on
    a finer grid beat more on a coarser one at every rate measured while the grid stayed
    at least MIN_SCALE texels per cell (six 256^2 sets: 2 bpp, 8 features +5.2 dB over 16;
    4 bpp, 8 +0.4 dB; 8 bpp, 12 +0.3 dB, where 8 at 1.8 texels per cell scored 0.2 dB
    under 12; bench/RESULTS.md)."""
    budget = bpp * width * height
    options = []
    for f in ((features,) if features else FEATURES):
        p = _best_grid(width, height, budget, lambda gw, gh, f=f: point(
            width, height, channels, gw, gh, f, hidden=hidden, layers=layers, bits=bits, pe_octaves=pe_octaves,
            mips=mips, mode=mode))
        if p is not None:
            options.append(p)
    if not options:
        finest = point(width, height, channels, width, height, features or FEATURES[0], hidden=hidden,
                       layers=layers, bits=bits, pe_octaves=pe_octaves, mips=mips, mode=mode)
        if budget > finest.bits:
            more = "raise features" if features and features < FEATURES[0] else "raise latent_bits"
            raise UsageError(f"bpp {bpp:g} is more than {finest.grid.features} latent features can spend on a "
                             f"{width}x{height} set (a latent grid as fine as the texture costs {finest.bpp:.2f} "
                             f"bpp); lower bpp or {more}", key="params.bpp")
        smallest = point(width, height, channels, 1, 1, features or FEATURES[-1], hidden=hidden, layers=layers,
                         bits=bits, pe_octaves=pe_octaves, mips=mips, mode=mode)
        raise UsageError(f"bpp {bpp:g} is too low for a {width}x{height} set: the smallest configuration costs "
                         f"{smallest.bpp:.2f} bpp (decoder {smallest.network.param_count} fp16 parameters); "
                         f"raise bpp or lower hidden/layers", key="params.bpp")
    preferred = [p for p in options if grid_scale(p) >= MIN_SCALE
                 and (features or p.grid.features >= MIN_AUTO_FEATURES)]
    if preferred:
        return min(preferred, key=lambda p: p.grid.features)
    return max(options, key=grid_scale)


def ladder(width, height, channels, **kw) -> list[RatePoint]:
    """Rates for the target-PSNR search, cheapest first (those that fit)."""
    out = []
    for bpp in (1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20):
        try:
            out.append(choose(width, height, channels, bpp, **kw))
        except UsageError:
            continue
    return out
