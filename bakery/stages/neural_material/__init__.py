"""Stage ``neural_material``: a layered material (GGX base, clear coat, sheen) distilled
into latent textures with a mip chain plus a small decoder MLP that evaluates
BRDF x cos from the latents and the light/view directions."""

from bakery.stages.neural_material.stage import NeuralMaterial

__all__ = ["NeuralMaterial"]
