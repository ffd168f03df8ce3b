"""Activation functions by name, with the numpy reference and its derivative.

The names are part of the bundle format (manifest ``activations``) and of the Slang
code (``bakery/nn/activations.slang`` defines one struct per name).
"""

from __future__ import annotations

import numpy as np

LEAKY_SLOPE = 0.01

ACTIVATIONS = ("relu", "leaky_relu", "tanh", "sigmoid", "exp", "identity")


def apply(name: str, x: np.ndarray) -> np.ndarray:
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "leaky_relu":
        return np.where(x > 0, x, LEAKY_SLOPE * x)
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "exp":
        return np.exp(x)
    if name == "identity":
        return x
    raise ValueError(f"unknown activation {name!r} (known: {', '.join(ACTIVATIONS)})")


def derivative(name: str, x: np.ndarray) -> np.ndarray:
    """d act(x) / dx, evaluated at the pre-activation ``x``."""
    if name == "relu":
        return (x > 0).astype(x.dtype)
    if name == "leaky_relu":
        return np.where(x > 0, 1.0, LEAKY_SLOPE)
    if name == "tanh":
        return 1.0 - np.tanh(x) ** 2
    if name == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-x))
        return s * (1.0 - s)
    if name == "exp":
        return np.exp(x)
    if name == "identity":
        return np.ones_like(x)
    raise ValueError(f"unknown activation {name!r}")
