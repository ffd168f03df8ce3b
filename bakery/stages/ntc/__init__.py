"""Stage `ntc`: neural texture compression of a material texture set (latent grids + one
decoder MLP), with its objective, material sets, rate control, CPU reference decoder and
per-texel decode shader."""

from bakery.stages.ntc.stage import NeuralTextureCompression

__all__ = ["NeuralTextureCompression"]
