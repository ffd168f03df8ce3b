"""Input encodings. Each has a numpy reference that defines its exact math; the Slang
code in ``bakery/nn/encodings.slang`` and the generated decoder shaders follow it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FrequencyEncoding:
    """sin/cos of 2*pi*2^k*x for k < octaves, per input.

    Output order, per input i: sin at octaves 0..K-1, then cos at octaves 0..K-1
    (the order of ``torch.cat([sin, cos], -1)`` over ``x[:, :, None] * freqs``).
    """

    n_inputs: int
    octaves: int

    kind = "frequency"

    @property
    def n_outputs(self) -> int:
        return self.n_inputs * 2 * self.octaves

    def to_dict(self) -> dict:
        return {"type": self.kind, "n_inputs": self.n_inputs, "octaves": self.octaves}

    def encode(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        freqs = 2.0 * np.pi * (2.0 ** np.arange(self.octaves))
        a = x[:, :, None] * freqs
        return np.concatenate([np.sin(a), np.cos(a)], axis=-1).reshape(x.shape[0], -1)


@dataclass(frozen=True)
class IdentityEncoding:
    """Passes inputs through unchanged (latent features, already-encoded inputs)."""

    n_inputs: int

    kind = "identity"

    @property
    def n_outputs(self) -> int:
        return self.n_inputs

    def to_dict(self) -> dict:
        return {"type": self.kind, "n_inputs": self.n_inputs}

    def encode(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)


def encoding_from_dict(d: dict):
    kind = d.get("type")
    if kind == "frequency":
        return FrequencyEncoding(int(d["n_inputs"]), int(d["octaves"]))
    if kind == "identity":
        return IdentityEncoding(int(d["n_inputs"]))
    raise ValueError(f"unknown encoding type {kind!r}")
