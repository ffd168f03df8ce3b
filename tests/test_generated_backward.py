"""The generated backward pass (CoopVecReduction generated_backward) builds on any device:
its Slang type-checks and links for one network and for a stack of two, with and without
the network's input gradient, on either gradient reduction. It runs only where the device
has cooperative vectors: test_coopvec.py and test_core_gradients.py check its gradients
there."""

from __future__ import annotations

import pytest

from bakery.nn.codegen import program_source
from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.parameters import CoopVecReduction, ParameterStore
from bakery.nn.stack import NetworkStack
from tests.test_coopvec_layout import _FakeDevice

# A loss through the program's last network (fed by the first, for a stack), its
# gradient taken in every thread as the training kernels do.
KERNEL = """
#include "nn/losses.slang"
RWStructuredBuffer<float> g_out;
[Differentiable] float sample_loss(float[2] x) {
    float[3] w = {1.0, 1.0, 1.0};
    float[3] t = {0.5, 0.5, 0.5};
    return bk_loss_l2<3>(%s, t, w);
}
[shader("compute")][numthreads(BK_GROUP, 1, 1)]
void train_step(uint3 tid: SV_DispatchThreadID, uint3 gtid: SV_GroupThreadID) {
    bk_train_begin(gtid.x);
    bk_train_sample(tid.x);
    float[2] x = { float(tid.x) / 4096.0, 0.25 };
    var p = diffPair(x);
    bwd_diff(sample_loss)(p, 1.0);
    g_out[tid.x] = p.d[0] + p.d[1];
}
"""


@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("input_gradients", [False, True])
@pytest.mark.parametrize("mode", ["splitk", "slices"])
def test_generated_backward_program_builds(device, stacked, input_gradients, mode):
    spec = NetworkSpec(FrequencyEncoding(2, 3), (24, 40), 3, "tanh")  # odd widths: padded tiles
    call = "Network.forward(x)"
    if stacked:
        spec = NetworkStack((("Encoder", NetworkSpec(FrequencyEncoding(2, 3), (24,), 8)),
                             ("Network", NetworkSpec(IdentityEncoding(8), (40,), 3, "leaky_relu"))))
        call = "Network.forward(Encoder.forward(x))"
    red = CoopVecReduction(group=128, mode=mode, generated_backward=True)
    store = ParameterStore(_FakeDevice(), spec, reduction=red, input_gradients=input_gradients)
    source = (store.defines() + "#define BAKERY_COOPVEC 1\n#define BAKERY_SOFTWARE 0\n" + '#include "nn/mlp.slang"\n'
              + program_source(spec, store.linear_args) + KERNEL % call)
    assert "#define BK_GEN_BWD 1" in source
    name = f"generated_backward_{stacked}_{input_gradients}_{mode}"
    module = device.spy.load_module_from_source(name, source)
    device.spy.link_program([module], [module.entry_point("train_step")])
