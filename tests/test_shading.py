"""The shared differentiable shading module: Slang against its numpy twin, gradients
against finite differences, reciprocity, energy conservation, direction draws."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.shading import brdf, directions

IN = 15  # albedo 3, normal 3, roughness 2, metalness 1, wi 3, wo 3
EVAL_SOURCE = '''#include "shading/brdf.slang"
#include "shading/directions.slang"
RWStructuredBuffer<float> g_in;
RWStructuredBuffer<float> g_out;
float3 f3(uint o) { return float3(g_in[o], g_in[o + 1], g_in[o + 2]); }
void put3(uint o, float3 v) { g_out[o] = v.x; g_out[o + 1] = v.y; g_out[o + 2] = v.z; }

[shader("compute")] [numthreads(64, 1, 1)]
void eval_brdf(uint3 tid: SV_DispatchThreadID, uniform uint count, uniform float3 dy)
{
    uint i = tid.x;
    if (i >= count) return;
    uint o = i * 15;
    var albedo = diffPair(f3(o));
    var normal = diffPair(f3(o + 3));
    var rough = diffPair(float2(g_in[o + 6], g_in[o + 7]));
    var metal = diffPair(g_in[o + 8]);
    var wi = diffPair(f3(o + 9));
    var wo = diffPair(f3(o + 12));
    uint r = i * 18;
    put3(r, bk_brdf_cos_aniso(albedo.p, normal.p, rough.p, metal.p, wi.p, wo.p));
    bwd_diff(bk_brdf_cos_aniso)(albedo, normal, rough, metal, wi, wo, dy);
    put3(r + 3, albedo.d);
    put3(r + 6, normal.d);
    g_out[r + 9] = rough.d.x; g_out[r + 10] = rough.d.y; g_out[r + 11] = metal.d;
    put3(r + 12, bk_brdf_cos(albedo.p, normal.p, rough.p.x, metal.p, wi.p, wo.p));
    put3(r + 15, bk_draw_direction(7u, 3u, i, 1u, 0.2));
}
'''
DY = np.array([0.3, 0.5, 0.2])


def _random_inputs(count: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    albedo = rng.uniform(0.05, 0.95, (count, 3))
    normal = np.concatenate([rng.normal(0, 0.35, (count, 2)), np.ones((count, 1))], axis=1)
    normal *= rng.uniform(0.8, 1.3, (count, 1))  # unnormalised on purpose: the BRDF normalises
    rough = rng.uniform(0.25, 0.9, (count, 2))
    metal = rng.uniform(0.0, 1.0, (count, 1))
    wi = directions.hemisphere_uniform(rng.uniform(0, 1, (count, 2)), 0.3)
    wo = directions.hemisphere_uniform(rng.uniform(0, 1, (count, 2)), 0.3)
    return np.concatenate([albedo, normal, rough, metal, wi, wo], axis=1)


def _numpy_brdf(x: np.ndarray) -> np.ndarray:
    return brdf.brdf_cos_aniso(x[:, 0:3], x[:, 3:6], x[:, 6:8], x[:, 8], x[:, 9:12], x[:, 12:15])


@pytest.fixture(scope="module")
def slang_eval(device):
    from bakery.nn.parameters import make_buffer

    kernel = device.kernel(EVAL_SOURCE, "eval_brdf")

    def run(x: np.ndarray) -> np.ndarray:
        n = len(x)
        inp = make_buffer(device, x.astype(np.float32).reshape(-1))
        out = make_buffer(device, np.zeros(n * 18, np.float32))
        device.submit(lambda enc: kernel.dispatch([(n + 63) // 64 * 64, 1, 1], vars={"g_in": inp, "g_out": out},
                                                  command_encoder=enc, count=n, dy=DY.astype(np.float32)))
        device.wait()
        return out.to_numpy().view(np.float32)[: n * 18].reshape(n, 18).astype(np.float64)

    return run


def _visible(x: np.ndarray) -> np.ndarray:
    """Samples whose light and view stay clear of the shading normal's horizon, where the
    BRDF is smooth (finite differences across the cut-off would measure the step)."""
    n = x[:, 3:6] / np.linalg.norm(x[:, 3:6], axis=1, keepdims=True)
    return (np.sum(n * x[:, 9:12], axis=1) > 0.05) & (np.sum(n * x[:, 12:15], axis=1) > 0.05)


def test_slang_brdf_matches_numpy_twin(slang_eval):
    x = _random_inputs(256)
    out = slang_eval(x)
    want = _numpy_brdf(x)
    np.testing.assert_allclose(out[:, 0:3], want, rtol=2e-4, atol=1e-5)
    iso = brdf.brdf_cos(x[:, 0:3], x[:, 3:6], x[:, 6], x[:, 8], x[:, 9:12], x[:, 12:15])
    np.testing.assert_allclose(out[:, 12:15], iso, rtol=2e-4, atol=1e-5)
    assert np.all(want >= 0) and np.any(want > 0.1)


def test_slang_brdf_gradients_match_finite_differences(slang_eval):
    x = _random_inputs(128, seed=2)
    x = x[_visible(x)]
    grads = slang_eval(x)[:, 3:12]  # d(dy . f) / d(albedo, normal, roughness, metalness)
    eps = 1e-6
    fd = np.zeros((len(x), 9))
    for k in range(9):
        hi, lo = x.copy(), x.copy()
        hi[:, k] += eps
        lo[:, k] -= eps
        fd[:, k] = (_numpy_brdf(hi) - _numpy_brdf(lo)) @ DY / (2 * eps)
    scale = np.abs(fd).max(axis=0) + 1e-3
    err = np.abs(grads - fd) / scale
    assert err.max() < 2e-3, f"worst relative gradient error {err.max():.2e} in column {err.max(axis=0).argmax()}"
    assert np.abs(fd[:, 3:6]).max() > 0.01  # the normal gradient is exercised, not zero


def test_brdf_is_reciprocal():
    x = _random_inputs(512, seed=3)
    a, n, r, m, wi, wo = x[:, 0:3], x[:, 3:6], x[:, 6:8], x[:, 8], x[:, 9:12], x[:, 12:15]
    cos_i = np.sum(n * wi, 1) / np.linalg.norm(n, axis=1)
    cos_o = np.sum(n * wo, 1) / np.linalg.norm(n, axis=1)
    ok = (cos_i > 0.05) & (cos_o > 0.05)
    f_io = brdf.brdf_cos_aniso(a, n, r, m, wi, wo)[ok] / cos_i[ok, None]
    f_oi = brdf.brdf_cos_aniso(a, n, r, m, wo, wi)[ok] / cos_o[ok, None]
    np.testing.assert_allclose(f_io, f_oi, rtol=1e-9, atol=1e-12)


def _furnace(roughness, metalness, wo, n_mu=1200, n_phi=360):
    """Directional albedo: integral of BRDF x cos over the light hemisphere (midpoint rule)."""
    mu = (np.arange(n_mu) + 0.5) / n_mu
    phi = (np.arange(n_phi) + 0.5) / n_phi * 2 * np.pi
    m, p = np.meshgrid(mu, phi, indexing="ij")
    s = np.sqrt(1 - m ** 2)
    wi = np.stack([s * np.cos(p), s * np.sin(p), m], -1)
    f = brdf.brdf_cos_aniso(np.ones(3), np.array([0.0, 0.0, 1.0]), np.asarray(roughness, float),
                            metalness, wi, np.asarray(wo, float))
    return f.mean(axis=(0, 1)) * 2 * np.pi


@pytest.mark.parametrize("metalness", [0.0, 0.5, 1.0])
def test_white_furnace_reflects_at_most_the_incident_energy(metalness):
    albedos = []
    for rough in ([0.3, 0.3], [0.6, 0.6], [1.0, 1.0], [0.35, 0.8]):
        for theta in (0.0, 0.7, 1.3):
            e = _furnace(rough, metalness, [np.sin(theta), 0.0, np.cos(theta)])
            albedos.append(e[0])
    albedos = np.array(albedos)
    assert albedos.max() <= 1.0 + 1e-3
    # single scattering loses energy at roughness 1 (~70% lost at grazing view), no more
    assert albedos.min() > 0.25


def test_anisotropic_roughness_stretches_the_highlight():
    wo = np.array([0.0, 0.0, 1.0])
    n = np.array([0.0, 0.0, 1.0])
    along_x = directions.hemisphere_uniform(np.array([0.93, 0.0]))     # tilted towards +x
    along_y = directions.hemisphere_uniform(np.array([0.93, 0.25]))    # tilted towards +y
    r = np.array([0.6, 0.2])
    fx = brdf.brdf_cos_aniso(np.ones(3), n, r, 1.0, along_x, wo)[0]
    fy = brdf.brdf_cos_aniso(np.ones(3), n, r, 1.0, along_y, wo)[0]
    assert fx > 2 * fy  # rougher along x: light off to the x side still reflects


def test_direction_draws_match_between_slang_and_numpy(slang_eval):
    out = slang_eval(_random_inputs(100))[:, 15:18]
    want = directions.draw_directions(7, 100, step=3, stream=1, min_cos=0.2)
    np.testing.assert_allclose(out, want, atol=2e-5)
    assert np.all(want[:, 2] >= 0.2 - 1e-6)
    np.testing.assert_allclose(np.linalg.norm(want, axis=1), 1.0, atol=1e-6)
    assert len(np.unique(want.round(6), axis=0)) == 100
