"""numpy twin of bakery/shading/layered.slang (the layered teacher material).

Same model, clamps and quadrature; arguments broadcast over leading axes.
``LayerConstants`` holds the layer params and knows its Slang uniform form.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bakery.shading.brdf import MIN_COS, brdf_cos, fresnel_schlick, to_normal_frame

MIN_SHEEN_ROUGHNESS = 0.3
QUADRATURES = (8, 16, 32, 64)


@dataclass(frozen=True)
class LayerConstants:
    coat_weight: float = 1.0
    coat_roughness: float = 0.3
    coat_ior: float = 1.5
    sheen_weight: float = 0.5
    sheen_color: tuple[float, float, float] = (0.5, 0.5, 0.5)
    sheen_roughness: float = 0.5
    coat_quadrature: int = 16

    def uniforms(self) -> dict:
        """The Slang ``LayerConstants`` struct as slangpy takes it."""
        d = asdict(self)
        d["sheen_color"] = [float(v) for v in self.sheen_color]
        d["coat_quadrature"] = int(self.coat_quadrature)
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


def quadrature_directions(count: int) -> np.ndarray:
    """[count, 3] internal directions of the inter-reflection quadrature (Slang:
    ``bk_coat_node``): cosine-weighted strata, cos(theta) = sqrt((j + 1/2) / n_theta),
    phi = (i + 1/2) 2 pi / n_phi, n_phi even so the set is closed under phi -> phi + pi."""
    n_phi = 4 if count <= 16 else 8
    n_theta = count // n_phi
    k = np.arange(count)
    mu = np.sqrt(((k // n_phi) + 0.5) / n_theta)
    phi = ((k % n_phi) + 0.5) * (2.0 * np.pi / n_phi)
    s = np.sqrt(1.0 - mu * mu)
    return np.stack([s * np.cos(phi), s * np.sin(phi), mu], -1)


def refract_in(w, eta: float):
    """Direction inside the coat (pointing away from the base) of outside direction ``w``."""
    xy = w[..., :2] / eta
    return np.concatenate([xy, np.sqrt(np.maximum(1.0 - np.sum(xy * xy, -1, keepdims=True), 0.0))], -1)


def internal_reflectance(d, eta: float, f0: float):
    """Fresnel reflectance of the coat's underside for internal direction ``d``: 1 beyond the
    critical angle, else Schlick at the outside angle (the one the light leaves at)."""
    sin2 = eta * eta * np.maximum(1.0 - d[..., 2] ** 2, 0.0)
    cos_out = np.sqrt(np.maximum(1.0 - sin2, 0.0))
    m = 1.0 - cos_out
    return np.where(sin2 >= 1.0, 1.0, f0 + (1.0 - f0) * m ** 5)


def _base_brdf(albedo, normal, roughness, metalness, a, b):
    """The base's BRDF (without the cosine), from brdf_cos / cos on the mapped normal."""
    n = normal / np.linalg.norm(normal, axis=-1, keepdims=True)
    cos_a = np.maximum(np.sum(a * n, -1, keepdims=True), MIN_COS)
    return brdf_cos(albedo, normal, roughness, metalness, a, b) / cos_a


def layered_brdf_cos(albedo, normal, roughness, metalness, c: LayerConstants, wi, wo):
    """BRDF x cos(theta_i), RGB, of the layered material."""
    wi, wo = np.asarray(wi, np.float64), np.asarray(wo, np.float64)
    base = brdf_cos(albedo, normal, roughness, metalness, wi, wo)
    shape = base.shape
    albedo = np.broadcast_to(np.asarray(albedo, np.float64), shape)
    normal = np.broadcast_to(np.asarray(normal, np.float64), shape)
    roughness = np.broadcast_to(np.asarray(roughness, np.float64), shape[:-1])
    metalness = np.broadcast_to(np.asarray(metalness, np.float64), shape[:-1])
    wi_b, wo_b = np.broadcast_to(wi, shape), np.broadcast_to(wo, shape)

    # the coat: its specular lobe, then the base seen through it
    eta, f0 = c.coat_ior, coat_f0(c.coat_ior)
    flat = np.broadcast_to(np.array([0.0, 0.0, 1.0]), shape)
    coat = brdf_cos(np.full(shape, f0), flat, np.full(shape[:-1], c.coat_roughness), np.ones(shape[:-1]), wi, wo)
    t_i = 1.0 - fresnel_schlick(np.full(shape, f0), wi_b[..., 2])[..., :1]
    t_o = 1.0 - fresnel_schlick(np.full(shape, f0), wo_b[..., 2])[..., :1]
    ri, ro = refract_in(wi_b, eta), refract_in(wo_b, eta)
    inside = _base_brdf(albedo, normal, roughness, metalness, ri, ro)
    for d in quadrature_directions(c.coat_quadrature):
        mirrored = np.array([-d[0], -d[1], d[2]])
        d_b, m_b = np.broadcast_to(d, shape), np.broadcast_to(mirrored, shape)
        inside = inside + (np.pi / c.coat_quadrature) * internal_reflectance(d, eta, f0) * (
            _base_brdf(albedo, normal, roughness, metalness, ri, d_b)
            * _base_brdf(albedo, normal, roughness, metalness, m_b, ro))
    coated = coat + (t_i * t_o / (eta * eta)) * wi_b[..., 2:] * inside
    under = (1.0 - c.coat_weight) * base + c.coat_weight * coated

    n = normal / np.linalg.norm(normal, axis=-1, keepdims=True)
    li, lo = to_normal_frame(wi_b, n), to_normal_frame(wo_b, n)
    h = li + lo
    h = h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-30)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = 1.0 / (4.0 * (li[..., 2] + lo[..., 2] - li[..., 2] * lo[..., 2]))
        lobe = charlie_d(h[..., 2], c.sheen_roughness) * v * li[..., 2]
    color = np.asarray(c.sheen_color, np.float64)
    sheen = c.sheen_weight * color * np.where((li[..., 2] > 0) & (lo[..., 2] > 0), lobe, 0.0)[..., None]
    s = c.sheen_weight * float(color.max())
    visible = (wi_b[..., 2] > 0) & (wo_b[..., 2] > 0)
    return np.where(visible[..., None], sheen + (1.0 - s) * under, 0.0)
