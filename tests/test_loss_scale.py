"""The CoopVec backend's network optimizer (nn/adam.slang) on any device: it reads only
plain buffers, so it runs on lavapipe. The last workgroup of adam_step runs the
loss-scale step (no dispatch of its own); it must leave what the same updates followed by
the loss-scale step in a dispatch of its own leave, bit for bit, step after step: skipped
steps with the scale halved, the scale doubled after its interval."""

from __future__ import annotations

import numpy as np

from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.optimizers import Adam
from bakery.nn.parameters import FIXED_POINT_SCALE, CoopVecReduction, ParameterStore, make_buffer
from tests.test_coopvec_layout import _FakeDevice

#: The reference: adam_step's updates and its loss-scale step as two dispatches, from the
#: same functions of nn/adam.slang.
TWO_DISPATCHES = r"""
[shader("compute")]
[numthreads(BK_ADAM_GROUP, 1, 1)]
void adam_words(uint3 tid: SV_DispatchThreadID, uniform AdamUniforms u, uniform uint words, uniform uint slices)
{
    if (tid.x < words)
        bk_adam_word(tid.x, slices, u);
}

[shader("compute")]
[numthreads(1, 1, 1)]
void loss_scale_update(uniform float norm, uniform float interval, uniform float max_scale)
{
    bk_loss_scale_step(norm, interval, max_scale);
}
"""


def test_adam_step_runs_the_loss_scale_step_in_its_last_workgroup(device):
    spec = NetworkSpec(FrequencyEncoding(2, 3), (64, 40), 3)  # 7.5k parameters: 15 workgroups of adam_step
    store = ParameterStore(_FakeDevice(), spec, reduction=CoopVecReduction(group=128, mode="splitk"))
    source = store.defines() + "#define BAKERY_COOPVEC 1\n" + '#include "nn/adam.slang"\n' + TWO_DISPATCHES
    module = device.spy.load_module_from_source("loss_scale_test", source)
    adam, words_only, scale = (
        device.spy.create_compute_kernel(device.spy.link_program([module], [module.entry_point(e)]))
        for e in ("adam_step", "adam_words", "loss_scale_update"))
    n, words = spec.param_count, store.weight_words
    assert words > 4 * 256
    rng = np.random.default_rng(5)
    master = spec.init_params(0)

    def state():
        return {"g_master": make_buffer(device, master),
                "g_half_owner": make_buffer(device, store.half_owner.to_numpy()),
                "g_adam_m": make_buffer(device, np.zeros(n, np.float32)),
                "g_adam_v": make_buffer(device, np.zeros(n, np.float32)),
                "g_grad_parts": make_buffer(device, np.zeros(n, np.int64)),
                "g_weights16": make_buffer(device, np.zeros(store.weights16.size, np.uint8)),
                "g_loss_state": make_buffer(device, np.array([1024.0, 1024.0 * 4096, 0.0, 0.0], np.float32)),
                "g_adam_done": make_buffer(device, np.zeros(1, np.uint32))}

    two, one = state(), state()
    opt, scaling = Adam(lr=1e-2), dict(norm=4096.0, interval=2.0, max_scale=65536.0)
    scales = []
    for step in range(1, 6):
        grads = np.round(rng.normal(0, 1e-3, n) * FIXED_POINT_SCALE).astype(np.int64)  # split-K: fixed point
        for s in (two, one):
            s["g_grad_parts"].copy_from_numpy(grads)
            if step == 3:  # this step's gradient overflowed fp16: skipped, scale halved
                loss = s["g_loss_state"].to_numpy().view(np.float32).copy()
                loss[2] = 1.0
                s["g_loss_state"].copy_from_numpy(loss)
        u = dict(u=opt.uniforms(step, opt.lr, n, 1.0), words=words, slices=1)

        def separate(enc):
            words_only.dispatch([words, 1, 1], vars=two, command_encoder=enc, **u)
            scale.dispatch([1, 1, 1], vars=two, command_encoder=enc, **scaling)

        device.submit(separate)
        device.submit(lambda enc: adam.dispatch([words, 1, 1], vars=one, command_encoder=enc, **u, **scaling))
        device.wait()
        for name in two:
            np.testing.assert_array_equal(one[name].to_numpy(), two[name].to_numpy(), err_msg=f"step {step}: {name}")
        assert one["g_adam_done"].to_numpy().view(np.uint32)[0] == 0  # the counter is ready for the next step
        scales.append(float(one["g_loss_state"].to_numpy().view(np.float32)[0]))
    assert scales == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0]
