"""``decoder.onnx``: the decoder MLP with its input encoding, for tools and runtimes
that load ONNX (onnxruntime, engines' ML plugins).

The graph takes raw inputs ``inputs`` [N, n_inputs] (float32) and returns ``outputs``
[N, n_outputs]; the encoding is computed exactly as ``bakery.nn.encodings`` defines it
(per input: sin at octaves 0..K-1, then cos at octaves 0..K-1). ``onnx`` is imported
lazily so the bundle reader stays numpy-only.
"""

from __future__ import annotations

import json

import numpy as np

import bakery
from bakery.nn import activations
from bakery.nn.network import NetworkSpec

OPSET = 17
IR_VERSION = 8        # the oldest IR that carries opset 17: loadable by older runtimes too
INPUT_NAME, OUTPUT_NAME = "inputs", "outputs"


def _activation_node(helper, name: str, src: str, dst: str):
    act = activations.get(name)
    return helper.make_node(act.onnx_op, [src], [dst], **act.onnx_attrs)


def build_onnx_model(spec: NetworkSpec, params: np.ndarray):
    """An ``onnx.ModelProto`` computing ``spec.forward(params, inputs)`` in float32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    h = spec.encoding.onnx_nodes(helper, const, INPUT_NAME, nodes)
    for i, ((w, b), layer) in enumerate(zip(spec.split(np.asarray(params, np.float32)), spec.layers)):
        out = OUTPUT_NAME if i == len(spec.layers) - 1 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [h, const(f"W{i}", w.astype(np.float32)), const(f"b{i}", b.astype(np.float32))],
                                      [f"z{i}"], transB=1))
        nodes.append(_activation_node(helper, layer.activation, f"z{i}", out))
        h = out
    graph = helper.make_graph(
        nodes, "bakery_decoder",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", spec.n_inputs])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", spec.n_outputs])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="bakery", producer_version=bakery.__version__)
    model.ir_version = IR_VERSION
    helper.set_model_props(model, {"bakery.network": json.dumps(spec.to_dict(), sort_keys=True)})
    onnx.checker.check_model(model, full_check=True)
    return model


def export_onnx_bytes(spec: NetworkSpec, params: np.ndarray) -> bytes:
    """Serialized ``decoder.onnx`` (deterministic for the same spec and params)."""
    return build_onnx_model(spec, params).SerializeToString(deterministic=True)
