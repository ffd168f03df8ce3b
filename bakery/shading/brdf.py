"""numpy twin of bakery/shading/brdf.slang, for tests and CPU-side references.

Same model, same clamps, same frame (tangent space, z up); every argument broadcasts
over leading axes (vectors on the last axis). Keep it in step with the Slang file: the
tests compare the two.
"""

from __future__ import annotations

import numpy as np

MIN_ROUGHNESS = 0.02
MIN_COS = 1e-4


def _dot(a, b):
    return np.sum(a * b, axis=-1)


def _normalize(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def fresnel_schlick(f0, cos_theta):
    m = 1.0 - np.clip(cos_theta, 0.0, 1.0)
    return f0 + (1.0 - f0) * (m ** 5)[..., None]


def to_normal_frame(v, n):
    """``v`` in the frame (t, b, n) of unit ``n``, t the x axis made orthogonal to n."""
    x = np.zeros_like(n)
    x[..., 0] = 1.0
    t = _normalize(x - n * n[..., :1])
    b = np.cross(n, t)
    return np.stack([_dot(v, t), _dot(v, b), _dot(v, n)], axis=-1)


def ggx_d(h, alpha):
    s = np.stack([h[..., 0] / alpha[..., 0], h[..., 1] / alpha[..., 1], h[..., 2]], axis=-1)
    q = _dot(s, s)
    return 1.0 / (np.pi * alpha[..., 0] * alpha[..., 1] * q * q)


def smith_lambda(w, alpha):
    z2 = np.maximum(w[..., 2] ** 2, MIN_COS ** 2)
    a2 = (alpha[..., 0] ** 2 * w[..., 0] ** 2 + alpha[..., 1] ** 2 * w[..., 1] ** 2) / z2
    return 0.5 * (np.sqrt(1.0 + a2) - 1.0)


def brdf_cos_aniso(albedo, normal, roughness, metalness, wi, wo):
    """BRDF x cos(theta_i), RGB; ``roughness`` has 2 components (tangent, bitangent)."""
    albedo, normal, wi, wo = (np.asarray(a, np.float64) for a in (albedo, normal, wi, wo))
    roughness = np.asarray(roughness, np.float64)
    metalness = np.asarray(metalness, np.float64)
    shape = np.broadcast_shapes(albedo.shape, normal.shape, wi.shape, wo.shape,
                                roughness.shape[:-1] + (3,), metalness.shape + (3,))
    albedo, normal, wi, wo = (np.broadcast_to(a, shape) for a in (albedo, normal, wi, wo))
    roughness = np.broadcast_to(roughness, shape[:-1] + (2,))
    metalness = np.broadcast_to(metalness, shape[:-1])[..., None]
    n = _normalize(normal)
    li, lo = to_normal_frame(wi, n), to_normal_frame(wo, n)
    alpha = np.maximum(roughness, MIN_ROUGHNESS) ** 2
    h = _normalize(li + lo)
    f0 = 0.04 * (1.0 - metalness) + albedo * metalness
    f = fresnel_schlick(f0, _dot(lo, h))
    g2 = 1.0 / (1.0 + smith_lambda(li, alpha) + smith_lambda(lo, alpha))
    spec = f * (ggx_d(h, alpha) * g2 / (4.0 * np.maximum(lo[..., 2], MIN_COS)))[..., None]
    wi_w = 1.0 - fresnel_schlick(f0, li[..., 2])
    wo_w = 1.0 - fresnel_schlick(f0, lo[..., 2])
    diffuse = (1.0 - metalness) * albedo * wi_w * wo_w * (li[..., 2] / np.pi)[..., None]
    visible = (wi[..., 2] > 0) & (wo[..., 2] > 0) & (li[..., 2] > 0) & (lo[..., 2] > 0)
    return np.where(visible[..., None], spec + diffuse, 0.0)


def brdf_cos(albedo, normal, roughness, metalness, wi, wo):
    """Isotropic BRDF x cos(theta_i), RGB."""
    r = np.asarray(roughness, np.float64)[..., None]
    return brdf_cos_aniso(albedo, normal, np.concatenate([r, r], axis=-1), metalness, wi, wo)
