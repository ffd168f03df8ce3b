"""CoopVec backend against the float64 reference, within fp16 tolerance.

Runs only where the device has cooperative vectors (NVIDIA, Vulkan); skipped on CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.experiments.reduction import always, forward_twice

from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.stages.neural_texture.objective import TextureFit
from bakery.nn.trainer import TrainConfig, Trainer
from tests.reference import batch_texels, mse_gradients, texel_uv

H, W, BATCH, SEED = 32, 48, 4096, 3


def _setup(device, activation="relu"):
    rng = np.random.default_rng(1)
    spec = NetworkSpec(FrequencyEncoding(2, 4), (64, 64), 3, activation)
    params = spec.init_params(2)
    image = rng.random((H, W, 3), dtype=np.float32)
    obj = TextureFit(device, image)
    return spec, params, image, obj, Trainer(device, spec, obj, TrainConfig(batch=BATCH, seed=SEED), params=params)


def test_coopvec_forward_matches_reference(coopvec_device):
    spec, params, image, obj, trainer = _setup(coopvec_device)
    got = obj.decode(trainer).reshape(-1, 3)
    t = np.arange(H * W)
    ref = spec.forward(params, texel_uv(t, W, H))
    assert np.abs(got - ref).max() < 2e-2
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 5e-3


@pytest.mark.parametrize("reduction", ["slices", "splitk-mma", "splitk-mma-generated", "splitk-mma-blocks",
                                       "splitk-mma-blocks-warp-copies", "splitk-mma-blocks-two-forwards",
                                       "splitk-mma-blocks-warp-copies-column-groups"])
@pytest.mark.parametrize("batch", [BATCH, 1 << 18, 1000])
def test_coopvec_gradients_match_reference(coopvec_device, batch, reduction, monkeypatch):
    """Per layer, at a small, a production and a ragged batch (fp32 sums, no 1/batch in
    fp16), with per-workgroup slices and with split-K on cooperative matrices (with the
    backward pass derived by autodiff or generated), and with the stored rows interleaved
    over blocks of samples, stored per thread or copied per warp; with the generated pass
    after one forward (the default) or after two (bwd_diff's primal, then
    backward_layers': the lab's forward_twice); and with each block's slots stored column
    group by column group (row_tiles)."""
    import slangpy as spy

    from bakery.nn import parameters

    if reduction != "slices" and not coopvec_device.spy.has_feature(spy.Feature.cooperative_matrix):
        pytest.skip("the device has no cooperative matrices")
    monkeypatch.setattr(parameters, "default_reduction", always(parameters.CoopVecReduction(
        **({} if reduction == "slices" else {"mode": "splitk"}),
        **({"group": 128, "row_block": 32} if "blocks" in reduction else {}),
        **({"row_copy": True} if "warp-copies" in reduction else {}),
        **({"row_tiles": True} if "column-groups" in reduction else {}),
        generated_backward=reduction.endswith("generated") or "blocks" in reduction)))
    if "two-forwards" in reduction:
        monkeypatch.setattr(parameters.ParameterStore, "defines", forward_twice(parameters.ParameterStore.defines))
    spec, params, image, obj, _ = _setup(coopvec_device, "leaky_relu")
    trainer = Trainer(coopvec_device, spec, obj, TrainConfig(batch=batch, seed=SEED), params=params)
    got = trainer.accumulate_gradients()
    t = batch_texels(SEED, 0, batch, W, H)
    ref, _ = mse_gradients(spec, params, texel_uv(t, W, H), image.reshape(-1, 3)[t])
    for l in spec.layers:
        sl = slice(l.weight_offset, l.bias_offset + l.n_out)
        assert np.linalg.norm(got[sl] - ref[sl]) / np.linalg.norm(ref[sl]) < 1e-2, l


def test_loss_scale_overflow_skips_the_step_and_halves(coopvec_device):
    spec, params, image, obj, trainer = _setup(coopvec_device)
    trainer.store.reset_loss_scale(trainer.store.loss_norm, scale=2.0 ** 30)  # overflows fp16
    trainer.train(1)
    np.testing.assert_array_equal(trainer.params(), params)
    assert trainer.store.loss_scale() == 2.0 ** 29
    trainer.store.reset_loss_scale(trainer.store.loss_norm, scale=1024.0)
    trainer.train(1)
    assert not np.array_equal(trainer.params(), params)
    assert trainer.store.loss_scale() == 1024.0


def test_coopvec_training_matches_portable(coopvec_device):
    """Same fit on both backends of the same GPU ends at nearly the same loss."""
    from bakery.device import open_device
    from bakery.imaging import psnr

    portable = open_device(coopvec_device.info.backend, portable=True)
    yy, xx = np.meshgrid(np.linspace(0, 1, 64), np.linspace(0, 1, 64), indexing="ij")
    img = np.stack([0.5 + 0.5 * np.sin(6 * xx + 2 * np.sin(5 * yy)), 0.5 + 0.5 * np.cos(8 * yy * xx),
                    0.5 + 0.5 * np.sin(5 * (xx - yy))], -1).astype(np.float32)
    spec = NetworkSpec(FrequencyEncoding(2, 4), (64, 64), 3)
    scores = []
    for dev in (coopvec_device, portable):
        obj = TextureFit(dev, img)
        tr = Trainer(dev, spec, obj, TrainConfig(steps=300, batch=8192, seed=4))
        tr.train()
        scores.append(psnr(obj.decode(tr), img))
    assert scores[1] > 25.0
    assert abs(scores[0] - scores[1]) < 1.5, scores


@pytest.mark.parametrize("batch", [1 << 18, 1000])
def test_two_trainings_give_the_same_bits(coopvec_device, batch):
    """Same network, target, seed and device: the same weights and Adam state bit for bit
    after many steps at the production batch (132 reduction workgroups adding into every
    weight at once) and at a ragged one: the fixed-point gradient sums do not depend on the
    order the GPU finishes workgroups in."""
    rng = np.random.default_rng(1)
    spec = NetworkSpec(FrequencyEncoding(2, 3), (64, 64, 64), 3)
    image = rng.random((256, 256, 3), dtype=np.float32)
    runs = []
    for _ in range(2):
        tr = Trainer(coopvec_device, spec, TextureFit(coopvec_device, image),
                     TrainConfig(steps=60, batch=batch, seed=SEED), params=spec.init_params(2))
        tr.train(60)
        runs.append((tr.store.download(), *tr.store.optimizer_state()))
    assert not np.array_equal(runs[0][0], spec.init_params(2))  # it trained
    for name, a, b in zip(("weights", "adam m", "adam v"), *runs):
        assert a.tobytes() == b.tobytes(), name
