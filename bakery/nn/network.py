"""A network description and its canonical parameter layout.

The canonical layout is the one on-disk form every other form is converted from:
one flat fp32 array, layer after layer, each layer its weights row-major ``[out][in]``
followed by its bias ``[out]``. fp16 copies, alignment padding and cooperative-vector
optimal layouts are made from it at load time only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bakery.nn import activations
from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding, encoding_from_dict


@dataclass(frozen=True)
class LayerSlice:
    """Where one dense layer lives in the canonical flat parameter array."""

    n_in: int
    n_out: int
    weight_offset: int
    bias_offset: int
    activation: str

    @property
    def weight_count(self) -> int:
        return self.n_in * self.n_out


@dataclass(frozen=True)
class NetworkSpec:
    """Encoding -> dense hidden layers -> dense output layer."""

    encoding: FrequencyEncoding | IdentityEncoding
    hidden: tuple[int, ...]
    n_outputs: int
    hidden_activation: str = "relu"
    output_activation: str = "identity"
    layers: tuple[LayerSlice, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for a in (self.hidden_activation, self.output_activation):
            if a not in activations.ACTIVATIONS:
                raise ValueError(f"unknown activation {a!r} (known: {', '.join(activations.ACTIVATIONS)})")
        dims = [self.encoding.n_outputs, *self.hidden, self.n_outputs]
        acts = [self.hidden_activation] * len(self.hidden) + [self.output_activation]
        layers, offset = [], 0
        for n_in, n_out, act in zip(dims[:-1], dims[1:], acts):
            layers.append(LayerSlice(n_in, n_out, offset, offset + n_in * n_out, act))
            offset += n_in * n_out + n_out
        object.__setattr__(self, "layers", tuple(layers))

    @property
    def n_inputs(self) -> int:
        return self.encoding.n_inputs

    @property
    def param_count(self) -> int:
        last = self.layers[-1]
        return last.bias_offset + last.n_out

    @property
    def macs_per_sample(self) -> int:
        return sum(l.weight_count for l in self.layers)

    def to_dict(self) -> dict:
        return {
            "encoding": self.encoding.to_dict(),
            "layers": [{"in": l.n_in, "out": l.n_out, "activation": l.activation} for l in self.layers],
            "hidden_activation": self.hidden_activation,
            "output_activation": self.output_activation,
            "param_count": self.param_count,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "NetworkSpec":
        layers = d["layers"]
        return cls(encoding=encoding_from_dict(d["encoding"]),
                   hidden=tuple(int(l["out"]) for l in layers[:-1]),
                   n_outputs=int(layers[-1]["out"]),
                   hidden_activation=d.get("hidden_activation", layers[0]["activation"]),
                   output_activation=d.get("output_activation", layers[-1]["activation"]))

    def init_params(self, seed: int) -> np.ndarray:
        """PyTorch's default Linear init, U(-1/sqrt(in), 1/sqrt(in)), from a fixed seed."""
        rng = np.random.default_rng(seed)
        p = np.empty(self.param_count, dtype=np.float32)
        for l in self.layers:
            bound = 1.0 / np.sqrt(l.n_in)
            p[l.weight_offset:l.bias_offset] = rng.uniform(-bound, bound, l.weight_count)
            p[l.bias_offset:l.bias_offset + l.n_out] = rng.uniform(-bound, bound, l.n_out)
        return p

    def split(self, params: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Views of (W [out, in], b [out]) per layer."""
        params = np.asarray(params)
        if params.shape != (self.param_count,):
            raise ValueError(f"expected {self.param_count} parameters, got shape {params.shape}")
        return [(params[l.weight_offset:l.bias_offset].reshape(l.n_out, l.n_in),
                 params[l.bias_offset:l.bias_offset + l.n_out]) for l in self.layers]

    def forward(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """float64 numpy reference forward: raw inputs [N, n_inputs] -> outputs [N, n_outputs]."""
        h = self.encoding.encode(x)
        for (w, b), l in zip(self.split(params), self.layers):
            h = activations.apply(l.activation, h @ w.astype(np.float64).T + b.astype(np.float64))
        return h
