"""numpy twin of bakery/shading/layered.slang (the layered teacher material).

Same model and clamps; arguments broadcast over leading axes. ``LayerConstants`` holds
the layer params and knows its Slang uniform form.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bakery.shading.brdf import brdf_cos, fresnel_schlick, to_normal_frame

MIN_SHEEN_ROUGHNESS = 0.3


@dataclass(frozen=True)
class LayerConstants:
    coat_weight: float = 1.0
    coat_roughness: float = 0.3
    coat_ior: float = 1.5
    sheen_weight: float = 0.5
    sheen_color: tuple[float, float, float] = (0.5, 0.5, 0.5)
    sheen_roughness: float = 0.5

    def uniforms(self) -> dict:
        """The Slang ``LayerConstants`` struct as slangpy takes it."""
        d = asdict(self)
        d["sheen_color"] = [float(v) for v in self.sheen_color]
        return d

    def to_dict(self) -> dict:
        return dict(asdict(self), sheen_color=list(self.sheen_color))


def coat_f0(ior: float) -> float:
    r = (ior - 1.0) / (ior + 1.0)
    return r * r


def charlie_d(cos_h, roughness):
    a = max(roughness, MIN_SHEEN_ROUGHNESS)
    sin2 = np.maximum(1.0 - cos_h * cos_h, 0.0)
    return (2.0 + 1.0 / a) * sin2 ** (0.5 / a) / (2.0 * np.pi)


def layered_brdf_cos(albedo, normal, roughness, metalness, c: LayerConstants, wi, wo):
    """BRDF x cos(theta_i), RGB, of the layered material."""
    wi, wo = np.asarray(wi, np.float64), np.asarray(wo, np.float64)
    base = brdf_cos(albedo, normal, roughness, metalness, wi, wo)
    f0 = coat_f0(c.coat_ior)
    flat = np.broadcast_to(np.array([0.0, 0.0, 1.0]), base.shape)
    coat = c.coat_weight * brdf_cos(np.full(base.shape, f0), flat, np.full(base.shape[:-1], c.coat_roughness),
                                    np.ones(base.shape[:-1]), wi, wo)
    att_i = 1.0 - c.coat_weight * fresnel_schlick(np.full(base.shape, f0), wi[..., 2])[..., :1]
    att_o = 1.0 - c.coat_weight * fresnel_schlick(np.full(base.shape, f0), wo[..., 2])[..., :1]
    under = coat + base * att_i * att_o

    normal = np.broadcast_to(np.asarray(normal, np.float64), base.shape)
    n = normal / np.linalg.norm(normal, axis=-1, keepdims=True)
    li, lo = to_normal_frame(np.broadcast_to(wi, base.shape), n), to_normal_frame(np.broadcast_to(wo, base.shape), n)
    h = li + lo
    h = h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-30)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = 1.0 / (4.0 * (li[..., 2] + lo[..., 2] - li[..., 2] * lo[..., 2]))
        lobe = charlie_d(h[..., 2], c.sheen_roughness) * v * li[..., 2]
    color = np.asarray(c.sheen_color, np.float64)
    sheen = c.sheen_weight * color * np.where((li[..., 2] > 0) & (lo[..., 2] > 0), lobe, 0.0)[..., None]
    s = c.sheen_weight * float(color.max())
    visible = (wi[..., 2] > 0) & (wo[..., 2] > 0)
    return np.where(np.broadcast_to(visible[..., None], base.shape), sheen + (1.0 - s) * under, 0.0)
