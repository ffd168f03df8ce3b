"""The split-K weight-gradient kernel of the CoopVec backend (nn/grad_reduce.slang) on
any device: it reads only plain buffers, so rows of stored activations written here
from numpy can be reduced on lavapipe and checked against dW = dy^T x in float64.
(The CoopVec stores that write those rows in training are checked on the GPU by
test_coopvec.py.) It sums on cooperative matrices, so it runs where the device has them
(tests/test_coopvec_spirv.py compiles it everywhere)."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.nn.codegen import program_source
from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.parameters import FIXED_POINT_SCALE, CoopVecReduction, ParameterStore, make_buffer
from bakery.nn.stack import NetworkStack
from tests.test_coopvec_layout import _FakeDevice


@pytest.mark.parametrize("group,groups,unroll,block", [
    (256, 3, 1, 1), (128, 5, 2, 1), (64, 2, 1, 1), (256, 7, 4, 1), (128, 5, 2, 32), (256, 7, 1, 128),
    (128, 5, 2, -32), (128, 7, 1, -128)])
@pytest.mark.parametrize("stacked", [False, True])
def test_split_k_reduction_matches_numpy(device, group, groups, unroll, block, stacked):
    """Every layer's dW and db, also for a stack of networks (each network reduces its own
    layers, found by their index in the whole store), with warps owning one output tile or
    several (a 40-wide layer over a 64-thread workgroup's one 64-lane wave), from rows
    stored one per sample or interleaved over blocks of samples (row_block), their slots
    sample by sample or (block < 0 here) column group by column group (row_tiles)."""
    import slangpy as spy

    if not device.spy.has_feature(spy.Feature.cooperative_matrix):
        pytest.skip("the device has no cooperative matrices")
    spec = NetworkSpec(FrequencyEncoding(2, 3), (24, 40), 3)  # odd widths: padded rows and chunks
    if stacked:
        spec = NetworkStack((("Encoder", NetworkSpec(FrequencyEncoding(2, 3), (24,), 8)),
                             ("Network", NetworkSpec(IdentityEncoding(8), (40,), 3))))
    store = ParameterStore(_FakeDevice(), spec,
                           reduction=CoopVecReduction(group=group, mode="splitk", unroll=unroll, row_block=abs(block),
                                                      row_copy=block < 0, row_tiles=block < 0))
    batch = 1000
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
    source = (store.defines() + "#define BAKERY_COOPVEC 1\n" + '#include "nn/mlp.slang"\n'
              + program_source(spec, store.linear_args) + '#include "nn/grad_reduce.slang"\n')
    module = device.spy.load_module_from_source(
        f"grad_reduce_test_{group}_{unroll}_{block}_{stacked}", source)
    kernel = device.spy.create_compute_kernel(
        device.spy.link_program([module], [module.entry_point("bk_reduce_gradients")]))
    grads = make_buffer(device, np.zeros(spec.param_count, np.int64))  # fixed point (nn/fixed_point.slang)
    state = make_buffer(device, np.array([1.0, 1.0, 0.0, 0.0], np.float32))
    bufs = {"g_acts": make_buffer(device, store.device_rows(rows)), "g_grad_parts": grads, "g_loss_state": state,
            "g_weights16": make_buffer(device, np.zeros(16, np.uint8))}
    device.submit(lambda enc: kernel.dispatch([groups * group, len(spec.layers), 1], vars=bufs,
                                              command_encoder=enc, batch=batch, groups=groups))
    device.wait()
    got = grads.to_numpy().view(np.int64)[: spec.param_count] / FIXED_POINT_SCALE
    for l, x, dy in zip(spec.layers, xs, dys):
        np.testing.assert_allclose(got[l.weight_offset:l.bias_offset].reshape(l.n_out, l.n_in), dy.T @ x,
                                   rtol=1e-4, atol=2e-3)
        np.testing.assert_allclose(got[l.bias_offset:l.bias_offset + l.n_out], dy.sum(0), rtol=1e-4, atol=2e-3)
    assert state.to_numpy().view(np.float32)[2] == 0.0  # finite: no overflow flagged
