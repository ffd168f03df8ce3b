"""The split-K weight-gradient kernel of the CoopVec backend (nn/grad_reduce.slang) on
any device: it reads only plain buffers, so rows of stored activations written here
from numpy can be reduced on lavapipe and checked against dW = dy^T x in float64.
(The CoopVec stores that write those rows in training are checked on the GPU by
test_coopvec.py.) The cooperative-matrix reduction runs where the device has them."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.nn.codegen import program_source
from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.parameters import CoopVecReduction, ParameterStore, make_buffer
from bakery.nn.stack import NetworkStack
from tests.test_coopvec_layout import _FakeDevice


@pytest.mark.parametrize("group,groups,unroll,reduce,out_tiles,block", [
    (256, 3, 1, "rows", 1, 1), (128, 5, 4, "rows", 1, 1), (256, 7, 8, "rows", 1, 1), (128, 5, 4, "rows", 1, 32),
    (256, 3, 1, "mma", 1, 1), (128, 5, 2, "mma", 1, 1), (64, 2, 1, "mma", 1, 1), (256, 7, 4, "mma", 1, 1),
    (256, 3, 2, "mma", 2, 1), (128, 5, 2, "mma", 2, 1), (128, 5, 1, "mma", 4, 1), (256, 7, 1, "mma", 3, 1),
    (128, 5, 2, "mma", 1, 32), (256, 7, 1, "mma", 3, 128)])
@pytest.mark.parametrize("stacked", [False, True])
def test_split_k_reduction_matches_numpy(device, group, groups, unroll, reduce, out_tiles, block, stacked):
    """Every layer's dW and db, also for a stack of networks (each network reduces its own
    layers, found by their index in the whole store), with warps owning one output tile,
    several, a whole layer, or a partial last group of them (out_tiles 2 over 3 tiles),
    from rows stored one per sample or interleaved over blocks of samples (row_block)."""
    import slangpy as spy

    if reduce == "mma" and not device.spy.has_feature(spy.Feature.cooperative_matrix):
        pytest.skip("the device has no cooperative matrices")
    spec = NetworkSpec(FrequencyEncoding(2, 3), (24, 40), 3)  # odd widths: padded rows and chunks
    if stacked:
        spec = NetworkStack((("Encoder", NetworkSpec(FrequencyEncoding(2, 3), (24,), 8)),
                             ("Network", NetworkSpec(IdentityEncoding(8), (40,), 3))))
    store = ParameterStore(_FakeDevice(), spec,
                           reduction=CoopVecReduction(group=group, mode="splitk", unroll=unroll, reduce=reduce,
                                                      out_tiles=out_tiles, row_block=block))
    bufs, xs, dys = _stored_rows(device, spec, store, 1000)
    kernel = _kernel(device, _reduce_source(spec, store), "bk_reduce_gradients")
    device.submit(lambda enc: kernel.dispatch([groups * group, len(spec.layers), 1], vars=bufs,
                                              command_encoder=enc, batch=1000, groups=groups))
    device.wait()
    _check_sums(spec, bufs, xs, dys)


def _stored_rows(device, spec, store, batch: int):
    """The buffers of the sum over random rows of ``batch`` samples, and each layer's x and dy."""
    rng = np.random.default_rng(7)
    # Rows past the batch, up to the next multiple of 16, as training leaves them: inputs
    # set, output gradients zero (the MMA reduction reads whole blocks of 16 samples).
    rows = np.zeros((batch + 8, store.row_bytes // 2), np.float16)
    rows[batch:] = rng.normal(0, 1, (8, rows.shape[1])).astype(np.float16)
    for k, l in enumerate(spec.layers):
        do = int(store.linear_args[k].split(", ")[7]) // 2
        rows[batch:, do:do + l.n_out] = 0
    xs, dys = [], []
    for k, l in enumerate(spec.layers):
        xo, do = (int(v) // 2 for v in store.linear_args[k].split(", ")[6:8])
        x = rng.normal(0, 1, (batch, l.n_in)).astype(np.float16)
        dy = rng.normal(0, 1, (batch, l.n_out)).astype(np.float16)
        rows[:batch, xo:xo + l.n_in], rows[:batch, do:do + l.n_out] = x, dy
        xs.append(x.astype(np.float64))
        dys.append(dy.astype(np.float64))
    bufs = {"g_acts": make_buffer(device, store.device_rows(rows)),
            "g_grad_parts": make_buffer(device, np.zeros(spec.param_count, np.float32)),
            "g_loss_state": make_buffer(device, np.array([1.0, 1.0, 0.0, 0.0], np.float32)),
            "g_weights16": make_buffer(device, np.zeros(16, np.uint8))}
    return bufs, xs, dys


def _reduce_source(spec, store) -> str:
    return (store.defines() + "#define BAKERY_COOPVEC 1\n" + '#include "nn/mlp.slang"\n'
            + program_source(spec, store.linear_args) + '#include "nn/grad_reduce.slang"\n')


def _kernel(device, source: str, entry: str):
    import hashlib

    name = "grad_reduce_test_" + hashlib.sha256(source.encode()).hexdigest()[:16]
    module = device.spy.load_module_from_source(name, source)
    return device.spy.create_compute_kernel(device.spy.link_program([module], [module.entry_point(entry)]))


def _check_sums(spec, bufs, xs, dys) -> None:
    got = bufs["g_grad_parts"].to_numpy().view(np.float32)[: spec.param_count]
    for l, x, dy in zip(spec.layers, xs, dys):
        np.testing.assert_allclose(got[l.weight_offset:l.bias_offset].reshape(l.n_out, l.n_in), dy.T @ x,
                                   rtol=1e-4, atol=2e-3)
        np.testing.assert_allclose(got[l.bias_offset:l.bias_offset + l.n_out], dy.sum(0), rtol=1e-4, atol=2e-3)
    assert bufs["g_loss_state"].to_numpy().view(np.float32)[2] == 0.0  # finite: no overflow flagged


@pytest.mark.parametrize("touch_group,lazy", [(4, True), (0, True), (0, False)])
def test_sum_and_a_group_update_share_a_dispatch(device, touch_group, lazy):
    """nn/reduce_and_update.slang: the split-K sum and a parameter group's optimizer step in
    one dispatch give the sum's gradients and, bit for bit, the group state that
    adam_plain_step gives on its own (marked cells read, the other half cleared)."""
    from bakery.nn.optimizers import Adam
    from bakery.nn.parameters import PlainParameters
    from bakery.nn.trainer import reduce_and_update_source

    spec = NetworkSpec(FrequencyEncoding(2, 3), (24, 40), 3)
    store = ParameterStore(_FakeDevice(), spec, reduction=CoopVecReduction(group=128, mode="splitk", unroll=2))
    bufs, xs, dys = _stored_rows(device, spec, store, 1000)
    rng = np.random.default_rng(3)
    cells, features = 1000, 4   # 1000 cells: three rows of 3 x 128 update threads, the last partial
    values = rng.uniform(0, 1, cells * features).astype(np.float32)
    fixed = (rng.normal(0, 1, cells * features) * 2.0 ** 32).astype(np.int64)
    unmarked = rng.random(cells) < 0.4
    fixed.reshape(cells, features)[unmarked] = 0
    marks = np.concatenate([(~unmarked).astype(np.uint32), np.ones(cells, np.uint32)])  # read half 0, clear half 1

    def group():
        g = PlainParameters(device, values, lr=1e-2, lo=0.0, hi=1.0, lazy=lazy, touch_group=touch_group)
        g.grads.copy_from_numpy(fixed.view(np.uint64))
        g.adam_m.copy_from_numpy(np.full(cells * features, 0.01, np.float32))
        if touch_group:
            g.touched.copy_from_numpy(marks)
        return g

    opt = Adam(lr=1e-2)

    def uniforms(g):
        return dict(u=opt.uniforms(3, g.lr, g.count, g.grad_scale), **g.optimizer_uniforms(0), **opt.plain_uniforms())

    alone, fused = group(), group()
    plain = _kernel(device, opt.plain_defines() + '#include "nn/adam_plain.slang"\n', "adam_plain_step")
    both = _kernel(device, reduce_and_update_source(_reduce_source(spec, store), opt), "bk_reduce_and_update")
    groups, layers = 3, len(spec.layers)
    rows = -(-fused.update_threads // (groups * 128))
    device.submit(lambda enc: plain.dispatch([alone.update_threads, 1, 1], vars=alone.optimizer_vars(),
                                             command_encoder=enc, **uniforms(alone)))
    device.submit(lambda enc: both.dispatch([groups * 128, layers + rows, 1], vars=dict(bufs, **fused.optimizer_vars()),
                                            command_encoder=enc, batch=1000, groups=groups, layers=layers,
                                            **uniforms(fused)))
    device.wait()
    _check_sums(spec, bufs, xs, dys)
    for name in ("params", "grads", "adam_m", "adam_v", "touched"):
        np.testing.assert_array_equal(getattr(fused, name).to_numpy(), getattr(alone, name).to_numpy(), err_msg=name)
    changed = fused.download() != values
    assert changed.any()
    if lazy:
        assert not changed.reshape(cells, features)[unmarked].any()
    if touch_group:
        assert not fused.touched.to_numpy().view(np.uint32)[cells:2 * cells].any()  # the next step's half cleared
