"""Generated decoder shaders compile with slangpy on the local Vulkan device (lavapipe on
CPU machines) and, reading the real weights.bin bytes, match NetworkSpec.forward."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.formats.shadergen import generate
from bakery.formats.weights import encode_weights
from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding
from bakery.nn.network import NetworkSpec

HARNESS = """
void run(int s, StructuredBuffer<uint> weights, StructuredBuffer<float> xs, RWStructuredBuffer<float> ys)
{
    float inputs[BAKERY_N_INPUTS] = {};
    for (uint i = 0u; i < BAKERY_N_INPUTS; i++)
        inputs[i] = xs[uint(s) * BAKERY_N_INPUTS + i];
    float outputs[BAKERY_N_OUTPUTS] = {};
    bakery_decode(weights, inputs, outputs);
    for (uint o = 0u; o < BAKERY_N_OUTPUTS; o++)
        ys[uint(s) * BAKERY_N_OUTPUTS + o] = outputs[o];
}
"""

CASES = [
    ("slang", "float16", NetworkSpec(FrequencyEncoding(2, 4), (32, 16), 3, "leaky_relu", "sigmoid")),
    ("slang", "float32", NetworkSpec(IdentityEncoding(5), (7,), 2, "tanh", "exp")),
    ("hlsl", "float16", NetworkSpec(FrequencyEncoding(3, 2), (24,), 4, "relu", "identity")),
]


@pytest.fixture(scope="module")
def device():
    spy = pytest.importorskip("slangpy")
    try:
        return spy, spy.create_device(type=spy.DeviceType.vulkan)
    except Exception as e:  # noqa: BLE001 - no Vulkan driver: nothing to compile against
        pytest.skip(f"no Vulkan device: {e}")


@pytest.mark.parametrize("lang,dtype,spec", CASES)
def test_generated_decoder_matches_numpy_forward(device, lang, dtype, spec):
    spy, dev = device
    params = spec.init_params(9)
    stored = params.astype(dtype).astype(np.float32)
    blob = encode_weights(spec, params, dtype)
    words = np.frombuffer(blob, dtype="<u4").copy()
    x = np.random.default_rng(2).random((64, spec.n_inputs)).astype(np.float32)

    source = generate(spec, lang, dtype=dtype) + HARNESS
    module = spy.Module(dev.load_module_from_source(f"decoder_{lang}_{dtype}_{spec.n_inputs}", source))
    res = spy.BufferUsage.shader_resource
    w_buf = dev.create_buffer(data=words, usage=res)
    x_buf = dev.create_buffer(data=x.ravel(), usage=res)
    y_buf = dev.create_buffer(size=4 * len(x) * spec.n_outputs, usage=res | spy.BufferUsage.unordered_access)
    module.run(np.arange(len(x), dtype=np.int32), w_buf, x_buf, y_buf)
    got = y_buf.to_numpy().view(np.float32).reshape(len(x), spec.n_outputs)

    want = spec.forward(stored, x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    assert np.ptp(want) > 0.01    # the comparison is not trivially between constants


def test_constants_and_offsets_are_baked_in():
    spec = NetworkSpec(FrequencyEncoding(2, 3), (16,), 3, "relu", "identity")
    text = generate(spec, "hlsl")
    assert "static const uint BAKERY_N_INPUTS = 2u;" in text and "BAKERY_N_OUTPUTS = 3u;" in text
    assert "float h0[12];" in text and "float h1[16];" in text
    # layer 0's matrix is at byte 128 (element 64), its bias at byte 512 (element 256)
    assert "bakery_load(weights, 64u + o * 12u + i)" in text and "bakery_load(weights, 256u + o)" in text
    glsl = generate(spec, "glsl", dtype="float32", prefix="leaf")
    assert "uintBitsToFloat(leaf_words[index])" in glsl and "void leaf_decode(float inputs[LEAF_N_INPUTS]" in glsl
    assert "StructuredBuffer" not in glsl
    with pytest.raises(ValueError):
        generate(spec, "metal")
