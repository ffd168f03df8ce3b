"""What every objective over the texels of an image shares: the target and per-channel
loss weights on the device, the batch uniforms, and decoding every texel through the
objective's ``decode`` kernel (which writes ``g_output``)."""

from __future__ import annotations

import numpy as np

from bakery.nn.parameters import make_buffer, output_buffer, read_back


class TexelObjective:
    def __init__(self, device, image: np.ndarray, channel_weights=None):
        image = np.ascontiguousarray(image, dtype=np.float32)
        self.height, self.width, self.channels = image.shape
        self.device = device
        w = np.ones(self.channels, np.float32) if channel_weights is None else np.asarray(channel_weights, np.float32)
        self._target = make_buffer(device, image.reshape(-1))
        self._weight = make_buffer(device, w)
        self._output = output_buffer(device, 4 * image.size)   # the decode writes every texel it reads back

    def set_channel_weights(self, channel_weights) -> None:
        """New per-channel loss weights for the steps after this (a weighting that
        re-balances the channels during training)."""
        w = np.asarray(channel_weights, np.float32)
        if w.shape != (self.channels,):
            raise ValueError(f"{self.channels} channel weights expected, got shape {w.shape}")
        self._weight.copy_from_numpy(np.ascontiguousarray(w))

    def vars(self) -> dict:
        return {"g_target": self._target, "g_channel_weight": self._weight, "g_output": self._output}

    def uniforms(self, step: int, batch: int, seed: int) -> dict:
        return {"width": self.width, "height": self.height, "batch": batch, "seed": seed & 0xFFFFFFFF,
                "step": step, "grad_scale": 1.0 / batch}

    def decode(self, trainer) -> np.ndarray:
        """Every texel as the trained network reproduces it, [H, W, C] float32."""
        n = self.width * self.height
        trainer.run_kernel("decode", n, self.uniforms(0, 1, 0))
        return read_back(self.device, self._output, 4 * n * self.channels).view(np.float32).reshape(
            self.height, self.width, self.channels)
