"""Stage `neural_texture`: one texture as a small MLP from UV to its channels."""

from bakery.stages.neural_texture.stage import NeuralTexture

__all__ = ["NeuralTexture"]
