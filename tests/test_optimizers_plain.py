"""Adam, AdamW and AMSGrad over plain parameter groups against their numpy definitions."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.nn.optimizers import (Adam, AdamW, AMSGrad, adam_reference, adamw_reference, amsgrad_reference,
                                  learning_rate)
from bakery.nn.parameters import FIXED_POINT_SCALE, PlainParameters
from bakery.nn.trainer import TrainConfig, Trainer


class _Fixed:
    """An objective whose backward pass adds a fixed gradient to the group."""

    def __init__(self, device, values, grads, lo=-3.0e38, hi=3.0e38):
        from bakery.nn.parameters import make_buffer

        self.group = PlainParameters(device, values, lr=0.03, lo=lo, hi=hi)
        self.fixed = np.round(np.asarray(grads, np.float64) * FIXED_POINT_SCALE).astype(np.int64)
        self._g = make_buffer(device, self.fixed)

    def slang_source(self):
        return '''
RWStructuredBuffer<uint64_t> g_plain_grads;
StructuredBuffer<uint64_t> g_fixed;
struct U { uint count; };
[shader("compute")] [numthreads(64, 1, 1)]
void train_step(uint3 tid: SV_DispatchThreadID, uniform U u)
{
    if (tid.x < u.count) g_plain_grads[tid.x] = g_plain_grads[tid.x] + g_fixed[tid.x];
}
'''

    def vars(self):
        return {"g_plain_grads": self.group.grads, "g_fixed": self._g}

    def uniforms(self, step, batch, seed):
        return {"count": self.group.count}

    def param_groups(self):
        return [self.group]


def _state(g):
    f = lambda b: b.to_numpy().view(np.float32)[: g.count].copy()  # noqa: E731
    return f(g.params), f(g.adam_m), f(g.adam_v), f(g.adam_vmax)


@pytest.mark.parametrize("opt", [Adam(lr=0.03), AdamW(lr=0.03, weight_decay=0.5), AMSGrad(lr=0.03)],
                         ids=["adam", "adamw", "amsgrad"])
def test_plain_optimizer_steps_match_numpy(device, opt):
    rng = np.random.default_rng(3)
    n = 300
    values = rng.normal(0, 1, n).astype(np.float32)
    grads = rng.normal(0, 1, n)
    obj = _Fixed(device, values, grads)
    tr = Trainer(device, None, obj, TrainConfig(steps=10, batch=n, optimizer=opt, schedule="cosine"))
    g32 = (obj.fixed.astype(np.float64) / FIXED_POINT_SCALE).astype(np.float32)
    p, m, v = values, np.zeros(n, np.float32), np.zeros(n, np.float32)
    vmax = np.zeros(n, np.float32)
    for step in range(3):
        tr.train(steps=1)
        lr = learning_rate("cosine", obj.group.lr, step, 10)
        if isinstance(opt, AMSGrad):
            p, m, v, vmax = amsgrad_reference(p, g32, m, v, vmax, step + 1, lr, opt)
        elif isinstance(opt, AdamW):
            p, m, v = adamw_reference(p, g32, m, v, step + 1, lr, opt)
        else:
            p, m, v = adam_reference(p, g32, m, v, step + 1, lr, opt)
        # a gradient that flips sign makes AMSGrad's max differ from v
        obj.fixed = -obj.fixed
        obj._g.copy_from_numpy(obj.fixed)
        g32 = -g32
    got_p, got_m, got_v, got_vmax = _state(obj.group)
    np.testing.assert_allclose(got_m, m, rtol=1e-5, atol=1e-8)
    # (1 - beta2) is formed from the fp32 beta2 on the device: a 1.3e-5 relative offset
    np.testing.assert_allclose(got_v, v, rtol=3e-5, atol=1e-10)
    np.testing.assert_allclose(got_p, p, rtol=1e-5, atol=1e-6)
    if isinstance(opt, AMSGrad):
        np.testing.assert_allclose(got_vmax, vmax, rtol=3e-5, atol=1e-10)
    assert not obj.group.gradients().any()


@pytest.mark.parametrize("opt", [Adam(lr=0.03), AdamW(lr=0.03, weight_decay=0.5), AMSGrad(lr=0.03)],
                         ids=["adam", "adamw", "amsgrad"])
def test_lazy_updates_leave_untouched_parameters_alone(device, opt):
    """A lazy group updates parameters with a gradient exactly as the dense rule does and
    leaves the others as they were (state included: no AdamW decay, AMSGrad's max kept); a
    dense group moves those on momentum."""
    rng = np.random.default_rng(5)
    n = 256
    values = rng.normal(0, 1, n).astype(np.float32)
    grads = rng.normal(0, 1, n)
    untouched = np.arange(n) % 3 == 0
    results = {}
    for lazy in (False, True):
        obj = _Fixed(device, values, grads)
        obj.group.lazy = lazy
        tr = Trainer(device, None, obj, TrainConfig(steps=4, batch=n, optimizer=opt))
        tr.train(steps=1)  # every parameter has a gradient: both groups move alike
        after_first = _state(obj.group)
        obj.fixed[untouched] = 0
        obj._g.copy_from_numpy(obj.fixed)
        tr.train(steps=1)
        results[lazy] = after_first, _state(obj.group)
        assert not obj.group.gradients().any()
    (first_dense, dense), (first_lazy, lazy) = results[False], results[True]
    for a, b in zip(first_dense, first_lazy):
        np.testing.assert_array_equal(a, b)
    for k in range(4):  # parameter, m, v, AMSGrad's max of v
        np.testing.assert_array_equal(lazy[k][untouched], first_lazy[k][untouched])
        np.testing.assert_array_equal(lazy[k][~untouched], dense[k][~untouched])
        if k < 3:  # dense: momentum moves them on (a max of a decaying v stays put)
            assert np.all(dense[k][untouched] != first_dense[k][untouched])


def test_the_three_rules_differ(device):
    """AdamW's decay and AMSGrad's max change the result (guards against a define ignored)."""
    rng = np.random.default_rng(4)
    values = rng.normal(0, 1, 64).astype(np.float32)
    grads = rng.normal(0, 1, 64)
    out = []
    for opt in (Adam(lr=0.03), AdamW(lr=0.03, weight_decay=0.5), AMSGrad(lr=0.03)):
        obj = _Fixed(device, values, grads)
        tr = Trainer(device, None, obj, TrainConfig(steps=4, batch=64, optimizer=opt))
        for _ in range(4):
            tr.train(steps=1)
            obj.fixed = np.zeros_like(obj.fixed)  # v now shrinks: AMSGrad keeps its max
            obj._g.copy_from_numpy(obj.fixed)
        out.append(obj.group.download())
    assert not np.array_equal(out[0], out[1]) and not np.array_equal(out[0], out[2])


def test_networks_refuse_plain_only_optimizers(device):
    from bakery.nn.encodings import FrequencyEncoding
    from bakery.nn.network import NetworkSpec
    from bakery.stages.neural_texture.objective import TextureFit

    spec = NetworkSpec(FrequencyEncoding(2, 2), (8,), 3)
    with pytest.raises(ValueError, match="plain parameter groups only"):
        Trainer(device, spec, TextureFit(device, np.zeros((4, 4, 3), np.float32)),
                TrainConfig(steps=1, optimizer=AMSGrad()))
