"""Activation functions: one table row each, holding everything that names or computes it.

The row gives an activation's on-disk id (``weights.bin``), the Slang struct the training
code uses, the numpy reference and derivative (tests and the bundle reader), the ONNX
operator and the expression generated decoder shaders use. Adding one touches:

- this table;
- its ``IActivation`` struct in ``bakery/nn/activations.slang`` (portable backend);
- its ``IVecActivation`` extension in ``bakery/nn/mlp_coopvec.slang`` (CoopVec training:
  the generated backward pass takes the derivative from the layer's output);
- the id table of docs/FORMAT.md and the id list of examples/engines/unreal_import_bundle.py
  (a loader reads ids, not names);
- optionally ``VECTOR_ACTIVATIONS`` in ``bakery/formats/coopvec_shader.py`` (a whole-vector
  form for the CoopVec decoder; without one it loops over elements).

tests/test_activation_table.py checks each of these against the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

LEAKY_SLOPE = 0.01


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Activation:
    name: str                              # the bundle format's name
    file_id: int                           # weights.bin layer record id; never renumber
    slang: str                             # struct in bakery/nn/activations.slang
    numpy: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]  # at the pre-activation value
    onnx_op: str
    shader: Callable[[str], str]           # expression over x, valid Slang, HLSL and GLSL
    onnx_attrs: dict = field(default_factory=dict)


TABLE = {a.name: a for a in (
    Activation("relu", 0, "ReLU", lambda x: np.maximum(x, 0.0), lambda x: (x > 0).astype(x.dtype),
               "Relu", lambda x: f"max({x}, 0.0)"),
    Activation("leaky_relu", 1, "LeakyReLU", lambda x: np.where(x > 0, x, LEAKY_SLOPE * x),
               lambda x: np.where(x > 0, 1.0, LEAKY_SLOPE), "LeakyRelu",
               lambda x: f"({x} > 0.0 ? {x} : {LEAKY_SLOPE!r} * {x})", {"alpha": LEAKY_SLOPE}),
    Activation("tanh", 2, "Tanh", np.tanh, lambda x: 1.0 - np.tanh(x) ** 2, "Tanh", lambda x: f"tanh({x})"),
    Activation("sigmoid", 3, "Sigmoid", _sigmoid, lambda x: _sigmoid(x) * (1.0 - _sigmoid(x)), "Sigmoid",
               lambda x: f"(1.0 / (1.0 + exp(-{x})))"),
    Activation("exp", 4, "Exp", np.exp, np.exp, "Exp", lambda x: f"exp({x})"),
    Activation("identity", 5, "Identity", lambda x: x, np.ones_like, "Identity", lambda x: x),
)}

ACTIVATIONS = tuple(TABLE)


def get(name: str) -> Activation:
    try:
        return TABLE[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r} (known: {', '.join(ACTIVATIONS)})") from None


def apply(name: str, x: np.ndarray) -> np.ndarray:
    return get(name).numpy(x)


def derivative(name: str, x: np.ndarray) -> np.ndarray:
    """d act(x) / dx, evaluated at the pre-activation ``x``."""
    return get(name).derivative(x)
