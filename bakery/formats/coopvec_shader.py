"""The cooperative-vector path of a generated decoder (Slang), and the weight buffer it reads.

The plain path (:mod:`bakery.formats.shadergen`) reads ``weights.bin`` as it is stored and
multiplies in scalar loops, so it runs on any GPU. This path runs each layer as one
``coopVecMatMulAdd`` on the tensor cores (Vulkan ``VK_NV_cooperative_vector``, D3D12 SM 6.9
through Slang). Those products want the matrices in the device's own
``InferencingOptimal`` layout, which only the driver knows, so the engine converts
``weights.bin``'s row-major fp16 matrices once at load
(``vkConvertCooperativeVectorMatrixNV``; from Python, :func:`coopvec_weight_buffer`)
into one buffer, copies the fp16 biases beside them, and passes where each landed.
"""

from __future__ import annotations

import numpy as np

from bakery.nn import activations
from bakery.nn.network import NetworkSpec

MATRIX_ALIGN = 64   # cooperative-vector matrix offsets
BIAS_ALIGN = 16     # and vector offsets, in bytes
#: Activations as whole-vector CoopVec expressions of ``v`` (element loops through a CoopVec
#: are slow on the driver, see bakery/nn/mlp_coopvec.slang); others go element by element.
VECTOR_ACTIVATIONS = {"relu": "max({v}, CoopVec<half, {n}>(half(0.0)))",
                      "leaky_relu": "max({v}, {v} * half(%r))" % activations.LEAKY_SLOPE}


def generate_coopvec(spec: NetworkSpec, *, prefix: str = "bakery") -> str:
    """Slang text of ``{prefix}_decode_coopvec(weights, at, inputs, outputs)``: the same
    network as ``{prefix}_decode``, with fp16 activations between layers.
    ``at`` is a ``{Prefix}CoopVecOffsets``: each layer's matrix and bias byte offset in
    ``weights`` (:func:`coopvec_weight_buffer` returns them)."""
    P = prefix
    struct = f"{''.join(w.title() for w in P.split('_'))}CoopVecOffsets"
    n_layers = len(spec.layers)
    enc = spec.encoding.n_outputs
    out = [f"// ---- {P}_decode_coopvec: cooperative-vector path (Slang; needs cooperative vectors) ----",
           "// weights: one buffer built once at load: each layer's matrix converted from weights.bin's",
           "// row-major fp16 [out][in] into the device's InferencingOptimal layout",
           f"// (vkConvertCooperativeVectorMatrixNV; {MATRIX_ALIGN}-byte aligned), and each bias copied as",
           f"// fp16 ({BIAS_ALIGN}-byte aligned). at: where each landed, in bytes.",
           f"struct {struct}", "{", f"    uint matrix[{n_layers}];", f"    uint bias[{n_layers}];", "};", "",
           f"void {P}_decode_coopvec(ByteAddressBuffer weights, {struct} at, float inputs[{spec.n_inputs}], "
           f"out float outputs[{spec.n_outputs}])",
           "{", f"    float e[{enc}] = {{}};"]
    out += spec.encoding.shader_lines(f"{spec.n_inputs}u", "inputs", "e")
    out += [f"    CoopVec<half, {enc}> h0;", f"    for (int i = 0; i < {enc}; i++)", "        h0[i] = half(e[i]);"]
    for n, lay in enumerate(spec.layers, start=1):
        out += [f"    // layer {n - 1}: {lay.n_in} -> {lay.n_out}, {lay.activation}",
                f"    CoopVec<half, {lay.n_out}> h{n} = coopVecMatMulAdd<half, {lay.n_out}>(h{n - 1}, "
                "CoopVecComponentType::Float16,",
                f"        weights, at.matrix[{n - 1}], CoopVecComponentType::Float16, weights, at.bias[{n - 1}], "
                "CoopVecComponentType::Float16,",
                "        CoopVecMatrixLayout::InferencingOptimal, false, 0);"]
        if lay.activation in VECTOR_ACTIVATIONS:
            out.append(f"    h{n} = {VECTOR_ACTIVATIONS[lay.activation].format(v=f'h{n}', n=lay.n_out)};")
        elif lay.activation != "identity":
            out += [f"    for (int i = 0; i < {lay.n_out}; i++)", "    {", f"        float v = float(h{n}[i]);",
                    f"        h{n}[i] = half({activations.get(lay.activation).shader('v')});", "    }"]
    out += [f"    for (int o = 0; o < {spec.n_outputs}; o++)", f"        outputs[o] = float(h{n_layers}[o]);", "}", ""]
    return "\n".join(out)


def coopvec_weight_buffer(spy_device, spec: NetworkSpec, params: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
    """(bytes, matrix offsets, bias offsets) of the buffer :func:`generate_coopvec`'s
    function reads, from the canonical parameters (e.g. ``decode_weights(weights.bin)``),
    converted by ``spy_device`` (a slangpy device with cooperative vectors)."""
    import slangpy as spy

    layout = spy.CoopVecMatrixLayout.inferencing_optimal
    chunks, matrix_at, bias_at, pos = [], [], [], 0

    def place(data: bytes, align: int) -> int:
        nonlocal pos
        pad = -pos % align
        chunks.append(b"\0" * pad + data)
        pos += pad + len(data)
        return pos - len(data)

    for w, b in spec.split(np.asarray(params, np.float32)):
        rows, cols = w.shape
        size = spy_device.get_coop_vec_matrix_size(rows, cols, layout, spy.DataType.float16)
        converted = np.zeros(size // 2, np.float16)
        spy_device.convert_coop_vec_matrix(converted, np.ascontiguousarray(w, np.float16), dst_layout=layout)
        matrix_at.append(place(converted.tobytes(), MATRIX_ALIGN))
        bias_at.append(place(np.asarray(b, np.float16).tobytes(), BIAS_ALIGN))
    data = b"".join(chunks)
    return np.frombuffer(data + b"\0" * (-len(data) % 4), np.uint8).copy(), matrix_at, bias_at
