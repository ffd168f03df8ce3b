"""The CoopVec parameter layout logic on the CPU, against a stand-in device whose
'TrainingOptimal' layout is a known permutation with padding (column-major tiles of 8
rows, padded to 16 columns): every canonical parameter must land in exactly one slot,
uploads must place fp16 weights where the layout puts them, the gradient reader must sum
the workgroups' slices and divide out the loss scale, and every weight must belong to
exactly one thread's accumulators. The real layouts are checked on the GPU by
test_coopvec.py."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.parameters import CoopVecReduction, ParameterStore

spy = pytest.importorskip("slangpy")


def _padded(rows, cols):
    return (rows + 7) // 8 * 8, (cols + 15) // 16 * 16


class _Buffer:
    def __init__(self, data):
        self.data = np.array(data, copy=True).view(np.uint8).reshape(-1)
        self.size = self.data.size

    def copy_from_numpy(self, a):
        raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        self.data[: raw.size] = raw

    def to_numpy(self):
        return self.data.copy()


class _FakeSpy:
    def get_coop_vec_matrix_size(self, rows, cols, layout, elem):
        r, c = _padded(rows, cols)
        return r * c * (2 if elem == spy.DataType.float16 else 4)

    def convert_coop_vec_matrix(self, dst, src, dst_layout=None):
        rows, cols = src.shape
        r, c = _padded(rows, cols)
        tiled = np.zeros((r, c), src.dtype)
        tiled[:rows, :cols] = src
        dst[:] = tiled.T.reshape(-1)  # column-major over the padded matrix

    def create_buffer(self, size, usage, data):
        return _Buffer(data)


class _FakeDevice:
    coopvec = True
    spy = _FakeSpy()


@pytest.fixture()
def store():
    spec = NetworkSpec(FrequencyEncoding(2, 3), (24, 40), 3)  # odd widths exercise the padding
    return ParameterStore(_FakeDevice(), spec)


def test_every_parameter_has_one_slot(store):
    pos = store.weight_pos_host
    assert len(np.unique(pos)) == store.spec.param_count
    owner = store.half_owner.to_numpy().view(np.uint32)
    assert (owner[pos // 2] == np.arange(store.spec.param_count)).all()
    assert ((owner == 0xFFFFFFFF).sum() + store.spec.param_count) == owner.size


def test_upload_places_fp16_weights_by_the_layout(store):
    spec = store.spec
    params = spec.init_params(3)
    store.upload(params)
    w16 = store.weights16.to_numpy().view(np.float16)
    for k, l in enumerate(spec.layers):
        wo, bo = (int(v) for v in store.linear_args[k].split(", ")[:2])
        r, c = _padded(l.n_out, l.n_in)
        w = params[l.weight_offset:l.bias_offset].reshape(l.n_out, l.n_in)
        block = w16[wo // 2: wo // 2 + r * c].reshape(c, r).T  # undo the column-major layout
        np.testing.assert_array_equal(block[:l.n_out, :l.n_in], w.astype(np.float16))
        np.testing.assert_array_equal(w16[bo // 2: bo // 2 + l.n_out],
                                      params[l.bias_offset:l.bias_offset + l.n_out].astype(np.float16))
    assert (store.download() == params).all()


def test_reduction_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="unknown gradient reduction mode 'atomic'"):
        CoopVecReduction(mode="atomic")  # measured, not shipped (bench/HISTORY.md)
    with pytest.raises(ValueError, match="multiple of 64"):
        CoopVecReduction(group=96, stage=32, mode="splitk")  # the sum's 64-lane waves
    with pytest.raises(ValueError, match="row_block 8"):
        CoopVecReduction(group=128, mode="splitk", row_block=8)  # not whole 16-sample tiles
    with pytest.raises(ValueError, match="only split-K"):
        CoopVecReduction(group=128, row_block=32)  # slices store no rows
    with pytest.raises(ValueError, match="row_block 128"):
        CoopVecReduction(group=64, mode="splitk", row_block=128)  # blocks larger than a workgroup's tile
    with pytest.raises(ValueError, match="row_copy"):
        CoopVecReduction(group=128, mode="splitk", row_block=16, row_copy=True)  # copies of part lines
    with pytest.raises(ValueError, match="row_tiles needs row_copy"):
        CoopVecReduction(group=128, mode="splitk", row_block=32, row_tiles=True)  # no copies
    wide_rows = NetworkSpec(FrequencyEncoding(2, 3), (128,), 3)
    with pytest.raises(ValueError, match="row_copy: 256 threads"):
        ParameterStore(_FakeDevice(), wide_rows, reduction=CoopVecReduction(
            group=256, mode="splitk", row_block=32, row_copy=True))


def test_gradient_slices_sum_and_unscale():
    spec = NetworkSpec(FrequencyEncoding(2, 3), (24, 40), 3)
    store = ParameterStore(_FakeDevice(), spec, reduction=CoopVecReduction(mode="slices"))
    n = store.spec.param_count
    rng = np.random.default_rng(0)
    store.groups = 7
    parts = rng.normal(0, 1, (store.reduction.max_groups, n)).astype(np.float32)
    store.grad_parts.copy_from_numpy(parts)
    store.reset_loss_scale(norm=4096.0, scale=512.0)
    expect = parts[:7].astype(np.float64).sum(0) / (512.0 * 4096.0)
    np.testing.assert_allclose(store.gradients(), expect, rtol=1e-6)


@pytest.mark.parametrize("group", [64, 128, 256])
def test_every_weight_has_one_accumulating_thread(group):
    """The ownership rule of bk_accumulate_layer/bk_store_layer covers each weight once."""
    spec = NetworkSpec(FrequencyEncoding(2, 3), (24, 40), 3)
    store = ParameterStore(_FakeDevice(), spec, reduction=CoopVecReduction(group=group, stage=64))
    total = 0
    for l in spec.layers:
        ci = -(-l.n_in // (group // l.n_out))
        groups = group // l.n_out
        assert groups <= group // l.n_out
        seen = np.zeros((l.n_out, l.n_in), int)
        for t in range(groups * l.n_out):
            o, i0 = t % l.n_out, (t // l.n_out) * ci
            for c in range(ci):
                if i0 + c < l.n_in:
                    seen[o, i0 + c] += 1
        assert (seen == 1).all()
        total += ci + 1
    assert store.acc_count == total


def test_default_reduction_takes_128_threads_for_the_widths_measured():
    """Split-K on cooperative matrices with 128-thread workgroups up to 64-wide layers (the
    widths benchmarked), 256 beyond, the generated backward pass and blocked rows (warp
    copies where their groupshared rows fit); per-workgroup slices without cooperative
    matrices."""
    from bakery.nn.parameters import default_reduction

    class _CoopMat(_FakeDevice):
        coopmat = True

    narrow = NetworkSpec(FrequencyEncoding(2, 3), (64, 40), 3)
    wide = NetworkSpec(FrequencyEncoding(2, 3), (64, 128), 3)
    assert default_reduction(_CoopMat(), narrow).group == 128
    assert default_reduction(_CoopMat(), wide).group == 256
    assert ParameterStore(_CoopMat(), wide).reduction.group == 256
    assert default_reduction(_CoopMat(), narrow).mode == "splitk"
    assert default_reduction(_CoopMat(), narrow).generated_backward
    # Rows in blocks of 32 everywhere; copied per warp, column group by column group, where
    # the copies' rows fit.
    for net, copies in ((narrow, True), (wide, False)):
        red = default_reduction(_CoopMat(), net)
        assert (red.row_block, red.row_copy, red.row_tiles) == (32, copies, copies)
    assert default_reduction(_FakeDevice(), narrow).mode == "slices"


def test_default_reduction_keeps_the_fixed_point_gradient_sums_in_range():
    """Workgroups sized from the multiprocessor count (264/132 on the H200's 132) never
    give one weight gradient more partial sums than its 64-bit fixed point holds."""
    from bakery.nn.parameters import FIXED_POINT_PARTIALS, default_reduction

    net = NetworkSpec(FrequencyEncoding(2, 3), (64, 64), 3)
    for coopmat in (True, False):
        for sms in (132, 4000):
            class _Device(_FakeDevice):
                pass
            dev = _Device()
            dev.coopmat, dev.sm_count = coopmat, sms
            red = default_reduction(dev, net)
            assert red.max_groups <= FIXED_POINT_PARTIALS and red.reduce_groups <= FIXED_POINT_PARTIALS
            if sms == 132:   # the H200's sizing is unchanged by the cap
                assert red.max_groups == 264 and (red.reduce_groups == 132 or not coopmat)
