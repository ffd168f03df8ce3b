"""Trainer behaviour on the portable backend: Adam against numpy, convergence,
determinism and checkpoint resume."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.imaging import psnr
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.optimizers import Adam, adam_reference, learning_rate
from bakery.nn.parameters import FIXED_POINT_SCALE
from bakery.stages.neural_texture.objective import TextureFit
from bakery.nn.trainer import TrainConfig, Trainer
from tests.images import photo_like


@pytest.fixture(scope="module")
def portable(device):
    if device.coopvec:
        pytest.skip("portable-backend checks; the CoopVec backend has its own in test_coopvec")
    return device


def _trainer(device, image, steps=50, seed=0, spec=None):
    spec = spec or NetworkSpec(FrequencyEncoding(2, 4), (16, 16), image.shape[2])
    return Trainer(device, spec, TextureFit(device, image),
                   TrainConfig(steps=steps, batch=1024, optimizer=Adam(lr=1e-2), seed=seed))


def test_adam_step_matches_numpy(portable):
    rng = np.random.default_rng(0)
    tr = _trainer(portable, rng.random((8, 8, 3), dtype=np.float32))
    n = tr.spec.param_count
    p = tr.params()
    m = rng.normal(0, 1e-3, n).astype(np.float32)
    v = rng.uniform(0, 1e-5, n).astype(np.float32)
    tr.store.set_optimizer_state(m, v)
    tr.step = 4  # the update is Adam's t = 5: bias corrections are not trivial
    g = rng.normal(0, 1e-2, n)
    fixed = np.round(g * FIXED_POINT_SCALE).astype(np.int64)
    tr.store.grads.copy_from_numpy(fixed.view(np.uint64))
    tr.apply_gradients()
    g32 = (fixed.astype(np.float64) / FIXED_POINT_SCALE).astype(np.float32)
    lr = learning_rate(tr.config.schedule, tr.config.optimizer.lr, 4, tr.config.steps)
    p_ref, m_ref, v_ref = adam_reference(p, g32, m, v, 5, lr, tr.config.optimizer)
    m_got, v_got = tr.store.optimizer_state()
    np.testing.assert_allclose(m_got, m_ref, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(v_got, v_ref, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(tr.params(), p_ref, rtol=1e-5, atol=1e-7)
    assert not np.allclose(tr.params(), p)  # the update did something
    assert not tr.store.gradients().any()    # and cleared the accumulator


def test_photo_like_image_trains_past_25_db(portable):
    image = photo_like(256)
    spec = NetworkSpec(FrequencyEncoding(2, 6), (32, 32), 3)
    tr = Trainer(portable, spec, TextureFit(portable, image),
                 TrainConfig(steps=600, batch=4096, optimizer=Adam(lr=1e-2), schedule="cosine", seed=1))
    obj = tr.objective
    before = psnr(obj.decode(tr), image)
    tr.train()
    after = psnr(obj.decode(tr), image)
    assert after >= 25.0, (before, after)
    assert after > before + 10.0


def test_same_seed_gives_identical_weights(portable):
    image = photo_like(32, seed=2)
    a, b, c = (_trainer(portable, image, seed=s) for s in (5, 5, 6))
    for t in (a, b, c):
        t.train()
    assert a.params().tobytes() == b.params().tobytes()
    assert a.params().tobytes() != c.params().tobytes()


def test_checkpoint_resume_is_exact(portable, tmp_path):
    image = photo_like(32, seed=3)
    straight = _trainer(portable, image, steps=40)
    straight.train()
    first = _trainer(portable, image, steps=40)
    first.train(20)
    first.save_checkpoint(tmp_path / "ckpt.npz")
    resumed = _trainer(portable, image, steps=40)
    resumed.load_checkpoint(tmp_path / "ckpt.npz")
    assert resumed.step == 20
    resumed.train()
    assert resumed.params().tobytes() == straight.params().tobytes()


@pytest.mark.parametrize("schedule", ["constant", "cosine", "one_cycle"])
def test_learning_rate_schedules(schedule):
    lrs = [learning_rate(schedule, 1e-2, s, 100) for s in range(100)]
    assert max(lrs) == pytest.approx(1e-2)
    if schedule == "constant":
        assert len(set(lrs)) == 1
    else:
        assert lrs[-1] == pytest.approx(1e-3)
    if schedule == "one_cycle":
        assert lrs[0] < lrs[9] and np.argmax(lrs) == 9


class _PlainTarget:
    """Objective with no network: pulls a plain parameter group towards a target."""

    def __init__(self, device, target):
        from bakery.nn.parameters import PlainParameters, make_buffer

        self.target = np.asarray(target, np.float32)
        self.group = PlainParameters(device, np.zeros_like(self.target), lr=0.05, lo=-1.0, hi=0.5)
        self._target = make_buffer(device, self.target)

    def slang_source(self) -> str:
        return '''#include "nn/fixed_point.slang"
RWStructuredBuffer<float> g_plain_params;
RWStructuredBuffer<uint64_t> g_plain_grads;
StructuredBuffer<float> g_target;
struct U { uint count; uint batch; };
[shader("compute")] [numthreads(64, 1, 1)]
void train_step(uint3 tid: SV_DispatchThreadID, uniform U u)
{
    if (tid.x >= u.count) return;
    bk_atomic_add_fixed(g_plain_grads, tid.x, 2.0 * (g_plain_params[tid.x] - g_target[tid.x]));
}
'''

    def vars(self) -> dict:
        return {"g_plain_params": self.group.params, "g_plain_grads": self.group.grads, "g_target": self._target}

    def uniforms(self, step, batch, seed) -> dict:
        return {"count": self.target.size, "batch": batch}

    def param_groups(self) -> list:
        return [self.group]


def test_trainer_fits_plain_parameters_without_a_network(device):
    target = np.array([0.25, -0.5, 0.9, 0.0], np.float32)  # 0.9 lies above the clamp
    objective = _PlainTarget(device, target)
    tr = Trainer(device, None, objective, TrainConfig(steps=300, batch=4, optimizer=Adam(lr=0.05)))
    grad = tr.accumulate_gradients()
    np.testing.assert_allclose(grad, 2.0 * (0.0 - target), atol=1e-6)
    objective.group.upload(np.zeros(4, np.float32))  # forget the accumulated gradient's update
    tr.train()
    np.testing.assert_allclose(objective.group.download(), [0.25, -0.5, 0.5, 0.0], atol=2e-3)
    assert tr.params().size == 0


def test_trainer_without_network_or_groups_is_refused(device):
    class Nothing:
        def param_groups(self):
            return []

    with pytest.raises(ValueError, match="nothing to train"):
        Trainer(device, None, Nothing(), TrainConfig(steps=1))
