"""The Slang network's gradients against a float64 numpy reference, every activation."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.nn.activations import ACTIVATIONS
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.parameters import make_buffer
from bakery.stages.neural_texture.objective import TextureFit
from bakery.nn.trainer import TrainConfig, Trainer
from tests.reference import batch_texels, mse_gradients, texel_uv

H, W, BATCH, SEED = 8, 12, 256, 7


def _case(device, activation, output_activation="identity", loss="l2"):
    rng = np.random.default_rng(3)
    spec = NetworkSpec(FrequencyEncoding(2, 2), (16, 8), 3, activation, output_activation)
    params = (spec.init_params(11) * 0.8).astype(np.float32)
    image = rng.random((H, W, 3), dtype=np.float32)
    obj = TextureFit(device, image, loss=loss)
    trainer = Trainer(device, spec, obj, TrainConfig(batch=BATCH, seed=SEED), params=params)
    t = batch_texels(SEED, 0, BATCH, W, H)
    return spec, params, image, trainer, t


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_weight_gradients_match_numpy(device, activation):
    if device.coopvec:
        pytest.skip("fp32 reference check is for the portable backend; CoopVec is checked in test_coopvec")
    spec, params, image, trainer, t = _case(device, activation, "sigmoid" if activation == "relu" else "identity")
    got = trainer.accumulate_gradients()
    ref, _ = mse_gradients(spec, params, texel_uv(t, W, H), image.reshape(-1, 3)[t])
    assert _rel(got, ref) < 1e-4


@pytest.mark.parametrize("private", [True, False], ids=["private-sums", "per-sample-adds"])
def test_both_cpu_gradient_paths_match_numpy(device, monkeypatch, private):
    """A CPU device sums a small network's weight gradients per thread over several tiles
    before adding them, a large one's per sample; both give the reference gradient, over
    several workgroups and a partial last one."""
    if device.coopvec:
        pytest.skip("fp32 reference check is for the portable backend")
    import bakery.nn.parameters as parameters

    monkeypatch.setattr(parameters, "CPU_PRIVATE_MAX_PARAMS", 1 << 30 if private else 0)
    batch = 64 * (parameters.CPU_MIN_GROUPS * parameters.CPU_TILES_PER_GROUP + 3) + 13  # ends in a partial tile
    spec = NetworkSpec(FrequencyEncoding(2, 2), (16, 8), 3, "tanh")
    params = (spec.init_params(11) * 0.8).astype(np.float32)
    image = np.random.default_rng(3).random((H, W, 3), dtype=np.float32)
    trainer = Trainer(device, spec, TextureFit(device, image), TrainConfig(batch=batch, seed=SEED), params=params)
    expected = parameters.CPU_TILES_PER_GROUP if private and device.info.software else 1
    assert trainer.store.tiles_per_group == expected
    assert parameters.cpu_tiles_per_group(1024) == 2  # a small batch keeps CPU_MIN_GROUPS workgroups
    got = trainer.accumulate_gradients()
    t = batch_texels(SEED, 0, batch, W, H)
    ref, _ = mse_gradients(spec, params, texel_uv(t, W, H), image.reshape(-1, 3)[t])
    assert _rel(got, ref) < 1e-4


@pytest.mark.parametrize("loss", ["l1", "relative_l2"])
def test_loss_gradients_match_numpy(device, loss):
    if device.coopvec:
        pytest.skip("fp32 reference check is for the portable backend")
    spec, params, image, trainer, t = _case(device, "tanh", loss=loss)
    got = trainer.accumulate_gradients()
    ref, _ = mse_gradients(spec, params, texel_uv(t, W, H), image.reshape(-1, 3)[t], loss)
    assert _rel(got, ref) < 1e-4


@pytest.mark.parametrize("backward", ["coopvec", "generated"])
def test_input_gradients_match_numpy(device, backward):
    """d loss / d input through the MLP and the frequency encoding (on CoopVec also with
    the generated backward pass: the encoding's backward takes the first layer's dx from
    the generated pass)."""
    import slangpy as spy

    from bakery.nn.parameters import CoopVecReduction

    if backward != "coopvec" and not (device.coopvec and device.spy.has_feature(spy.Feature.cooperative_matrix)):
        pytest.skip("the generated backward passes run on cooperative vectors (split-K on matrices)")
    spec = NetworkSpec(FrequencyEncoding(2, 3), (16, 16), 3, "tanh")
    params = spec.init_params(5)
    rng = np.random.default_rng(9)
    n = 128
    x = rng.random((n, 2), dtype=np.float32)
    target = rng.random((n, 3), dtype=np.float32)
    from bakery.nn.codegen import network_source
    from bakery.nn.parameters import ParameterStore

    generated = None if backward == "coopvec" else CoopVecReduction(
        group=128, mode="splitk", generated_backward=True)
    store = ParameterStore(device, spec, reduction=generated)
    store.upload(params)
    store.reserve_rows(n)
    src = (store.defines() + '#include "nn/mlp.slang"\n' + network_source(spec, store.linear_args) + """
#include "nn/losses.slang"
StructuredBuffer<float> g_x; StructuredBuffer<float> g_t; RWStructuredBuffer<float> g_dx;
[Differentiable] float sample_loss(float[2] x, no_diff float[3] t) {
    float[3] w = {1.0, 1.0, 1.0};
    return bk_loss_l2<3>(Network.forward(x), t, w);
}
[shader("compute")][numthreads(BK_GROUP, 1, 1)]
void input_grad(uint3 tid: SV_DispatchThreadID, uint3 gtid: SV_GroupThreadID, uniform uint n, uniform float scale) {
    bk_train_begin(gtid.x);
    bk_train_sample(tid.x);  // split-K stores its rows (and warp copies find their block) by sample
    uint i = min(tid.x, n - 1);
    float[2] x = { g_x[2 * i], g_x[2 * i + 1] };
    float[3] t = { g_t[3 * i], g_t[3 * i + 1], g_t[3 * i + 2] };
    var p = diffPair(x);
    bwd_diff(sample_loss)(p, t, tid.x < n ? scale : 0.0);
    if (tid.x < n) { g_dx[2 * i] = p.d[0]; g_dx[2 * i + 1] = p.d[1]; }
}
""")
    kernel = device.kernel(src, "input_grad")
    bx, bt, bdx = (make_buffer(device, a) for a in (x.reshape(-1), target.reshape(-1), np.zeros(2 * n, np.float32)))
    device.submit(lambda enc: kernel.dispatch([n, 1, 1], vars=dict(store.network_vars(), g_x=bx, g_t=bt, g_dx=bdx),
                                              command_encoder=enc, n=n, scale=1.0 / n))
    device.wait()
    got = bdx.to_numpy().view(np.float32)[: 2 * n].reshape(n, 2)
    _, ref = mse_gradients(spec, params, x, target)
    assert _rel(got, ref) < (2e-2 if device.coopvec else 1e-4)  # fp16 vectors on CoopVec
