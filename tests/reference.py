"""float64 numpy references for the Slang trainer: the GPU batch sampler, the texture
objective's loss, and its gradient by explicit backpropagation."""

from __future__ import annotations

import numpy as np

from bakery.nn import activations
from bakery.nn.network import NetworkSpec

M32 = np.uint64(0xFFFFFFFF)


def _pcg(v):
    v = np.asarray(v, np.uint64) & M32
    state = (v * np.uint64(747796405) + np.uint64(2891336453)) & M32
    word = (((state >> ((state >> np.uint64(28)) + np.uint64(4))) ^ state) * np.uint64(277803737)) & M32
    return ((word >> np.uint64(22)) ^ word) & M32


def hash3(a, b, c):
    """bakery/nn/random.slang bk_hash3, vectorised."""
    a, b, c = (np.asarray(x, np.uint64) & M32 for x in (a, b, c))
    return _pcg(a ^ _pcg(b ^ _pcg(c)))


def batch_texels(seed: int, step: int, batch: int, width: int, height: int) -> np.ndarray:
    return (hash3(seed, step, np.arange(batch)) % np.uint64(width * height)).astype(np.int64)


def texel_uv(t: np.ndarray, width: int, height: int) -> np.ndarray:
    return np.stack([(t % width + 0.5) / width, (t // width + 0.5) / height], -1).astype(np.float32).astype(np.float64)


def mse_gradients(spec: NetworkSpec, params: np.ndarray, x: np.ndarray, target: np.ndarray, loss: str = "l2"):
    """Gradient of mean over samples of mean over channels of the per-element loss:
    l2 (y - t)^2, l1 |y - t|, relative_l2 (y - t)^2 / (stop_gradient(y)^2 + 0.01).

    Returns (d params in canonical layout, d inputs)."""
    params = params.astype(np.float64)
    enc_in = np.asarray(x, np.float64)
    h = spec.encoding.encode(enc_in)
    pre, post = [], [h]
    for (w, b), l in zip(spec.split(params), spec.layers):
        z = h @ w.T + b
        h = activations.apply(l.activation, z)
        pre.append(z)
        post.append(h)
    n, c = target.shape
    if loss == "l2":
        dy = 2.0 * (h - target) / (n * c)
    elif loss == "l1":
        dy = np.sign(h - target) / (n * c)
    else:
        dy = 2.0 * (h - target) / (h.astype(np.float32).astype(np.float64) ** 2 + 0.01) / (n * c)
    grad = np.zeros_like(params)
    for k in range(len(spec.layers) - 1, -1, -1):
        l = spec.layers[k]
        w = params[l.weight_offset:l.bias_offset].reshape(l.n_out, l.n_in)
        dz = dy * activations.derivative(l.activation, pre[k])
        grad[l.weight_offset:l.bias_offset] = (dz.T @ post[k]).reshape(-1)
        grad[l.bias_offset:l.bias_offset + l.n_out] = dz.sum(0)
        dy = dz @ w
    # Through the frequency encoding: d/dx sin(a x) = a cos(a x), d/dx cos(a x) = -a sin(a x).
    if spec.encoding.kind == "frequency":
        k_oct = spec.encoding.octaves
        freqs = 2.0 * np.pi * 2.0 ** np.arange(k_oct)
        a = enc_in[:, :, None] * freqs
        de = dy.reshape(n, spec.n_inputs, 2 * k_oct)
        dx = (de[:, :, :k_oct] * freqs * np.cos(a) - de[:, :, k_oct:] * freqs * np.sin(a)).sum(-1)
    else:
        dx = dy
    return grad, dx
