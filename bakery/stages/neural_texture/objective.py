"""Objective: fit a network from UV to the channels of a texture (the neural texture of
the neural-shading literature, and the decoder half of texture compression)."""

from __future__ import annotations

import numpy as np

from bakery.nn.texel_objective import TexelObjective

LOSSES = ("l2", "l1", "relative_l2")


class TextureFit(TexelObjective):
    #: Nothing reads d loss / d UV: the network skips its first layer's input gradient.
    input_gradients = False

    def __init__(self, device, image: np.ndarray, *, loss: str = "l2", channel_weights=None):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r} (known: {', '.join(LOSSES)})")
        super().__init__(device, image, channel_weights)
        self.loss = loss

    def slang_source(self) -> str:
        return (f"#define BK_CHANNELS {self.channels}\n#define BK_LOSS bk_loss_{self.loss}\n"
                '#include "stages/neural_texture/texture_fit.slang"\n')
