"""Objective: fit a network from UV to the channels of a texture (the neural texture of
the neural-shading literature, and the decoder half of texture compression)."""

from __future__ import annotations

import numpy as np

from bakery.nn.parameters import make_buffer

LOSSES = ("l2", "l1", "relative_l2")


class TextureFit:
    def __init__(self, device, image: np.ndarray, *, loss: str = "l2", channel_weights=None):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r} (known: {', '.join(LOSSES)})")
        image = np.ascontiguousarray(image, dtype=np.float32)
        self.height, self.width, self.channels = image.shape
        self.device, self.loss = device, loss
        w = np.ones(self.channels, np.float32) if channel_weights is None else np.asarray(channel_weights, np.float32)
        self._target = make_buffer(device, image.reshape(-1))
        self._weight = make_buffer(device, w)
        self._output = make_buffer(device, np.zeros(image.size, np.float32))

    def slang_source(self) -> str:
        return (f"#define BK_CHANNELS {self.channels}\n#define BK_LOSS bk_loss_{self.loss}\n"
                '#include "bakery/tasks/texture_fit.slang"\n')

    def vars(self) -> dict:
        return {"g_target": self._target, "g_channel_weight": self._weight, "g_output": self._output}

    def uniforms(self, step: int, batch: int, seed: int) -> dict:
        return {"width": self.width, "height": self.height, "batch": batch, "seed": seed & 0xFFFFFFFF,
                "step": step, "grad_scale": 1.0 / batch}

    def decode(self, trainer) -> np.ndarray:
        """The whole texture as the trained network reproduces it, [H, W, C] float32."""
        n = self.width * self.height
        trainer.run_kernel("decode", n, self.uniforms(0, 1, 0))
        out = self._output.to_numpy().view(np.float32)[: n * self.channels]
        return out.reshape(self.height, self.width, self.channels).copy()
