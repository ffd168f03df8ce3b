"""NTC's training kernel without its latent-gradient scatter, to time what the scatter
costs (bench/ntc.py ``--big-scatter none``): the latents do not train.

The product ships the scatters that add the same fixed-point values (bakery.stages.ntc.
objective.LATENT_SCATTER, ntc_fit.slang BK_NTC_SCATTER); this variant gives
BK_NTC_SCATTER a value none of ntc_fit.slang's scatter branches takes, so the kernel
computes the latents' gradients and adds none of them.
"""

from __future__ import annotations

from bakery.stages.ntc.objective import LATENT_SCATTER, LatentTextureFit

#: The name benchmarks and tests give this variant beside the product's scatters.
NONE = "none"
#: The BK_NTC_SCATTER value no scatter branch takes.
NO_SCATTER = -1


class WithoutLatentGradients(LatentTextureFit):
    """A :class:`LatentTextureFit` whose training kernel adds no latent gradients; its
    ``latent_scatter`` names the scatter it leaves out."""

    def slang_source(self) -> str:
        source = super().slang_source()
        scatter = f"#define BK_NTC_SCATTER {LATENT_SCATTER.index(self.latent_scatter)}\n"
        if scatter not in source:
            raise RuntimeError(f"LatentTextureFit's source no longer defines {scatter.strip()!r}: "
                               "update bench/experiments/ntc_scatter.py")
        return source.replace(scatter, f"#define BK_NTC_SCATTER {NO_SCATTER}\n")


def latent_texture_fit(*args, latent_scatter: str | None = None, **kwargs) -> LatentTextureFit:
    """A LatentTextureFit with ``latent_scatter`` one of the product's, None (the device's
    choice), or :data:`NONE` (this lab's variant, which leaves the device's choice out)."""
    if latent_scatter == NONE:
        return WithoutLatentGradients(*args, **kwargs)
    return LatentTextureFit(*args, latent_scatter=latent_scatter, **kwargs)
