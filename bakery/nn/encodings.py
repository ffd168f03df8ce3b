"""Input encodings. Each class carries everything about itself: the numpy reference that
defines its exact math, its Slang type (the struct in ``bakery/nn/encodings.slang``),
the lines generated decoder shaders compute it with, and its ONNX nodes. Adding an
encoding touches this module and its Slang struct only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TWO_PI = "6.283185307179586"


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
        a = x[:, :, None] * self._freqs()
        return np.concatenate([np.sin(a), np.cos(a)], axis=-1).reshape(x.shape[0], -1)

    def _freqs(self) -> np.ndarray:
        return 2.0 * np.pi * (2.0 ** np.arange(self.octaves))

    def slang_type(self) -> str:
        return f"FrequencyEncoding<{self.n_inputs}, {self.octaves}>"

    def shader_lines(self, n_inputs: str, src: str, dst: str) -> list[str]:
        """Loops filling ``dst`` from ``src`` (Slang, HLSL and GLSL alike)."""
        k = self.octaves
        return [f"    // frequency encoding: per input, sin at octaves 0..{k - 1}, then cos at octaves 0..{k - 1}",
                f"    for (uint i = 0u; i < {n_inputs}; i++)", "    {",
                f"        for (uint k = 0u; k < {k}u; k++)", "        {",
                f"            float a = {src}[i] * ({TWO_PI} * float(1u << k));",
                f"            {dst}[i * {2 * k}u + k] = sin(a);",
                f"            {dst}[i * {2 * k}u + {k}u + k] = cos(a);",
                "        }", "    }"]

    def onnx_nodes(self, helper, const, src: str, nodes: list) -> str:
        """Appends the encoding's ONNX nodes; returns the name of its output."""
        freqs = self._freqs().astype(np.float32)
        nodes += [
            helper.make_node("Unsqueeze", [src, const("enc_axis", np.array([2], np.int64))], ["enc_x"]),
            helper.make_node("Mul", ["enc_x", const("enc_freqs", freqs)], ["enc_arg"]),       # [N, n_in, K]
            helper.make_node("Sin", ["enc_arg"], ["enc_sin"]),
            helper.make_node("Cos", ["enc_arg"], ["enc_cos"]),
            helper.make_node("Concat", ["enc_sin", "enc_cos"], ["enc_cat"], axis=2),          # [N, n_in, 2K]
            helper.make_node("Reshape", ["enc_cat", const("enc_shape", np.array([-1, self.n_outputs], np.int64))],
                             ["encoded"]),
        ]
        return "encoded"


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

    def slang_type(self) -> str:
        return f"IdentityEncoding<{self.n_inputs}>"

    def shader_lines(self, n_inputs: str, src: str, dst: str) -> list[str]:
        return [f"    for (uint i = 0u; i < {n_inputs}; i++)", f"        {dst}[i] = {src}[i];"]

    def onnx_nodes(self, helper, const, src: str, nodes: list) -> str:
        return src


def encoding_from_dict(d: dict):
    kind = d.get("type")
    if kind == "frequency":
        return FrequencyEncoding(int(d["n_inputs"]), int(d["octaves"]))
    if kind == "identity":
        return IdentityEncoding(int(d["n_inputs"]))
    raise ValueError(f"unknown encoding type {kind!r}")
