"""decoder.onnx passes onnx.checker and evaluates (onnx.reference) to NetworkSpec.forward."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

from bakery.formats.bundle import BundleWriter  # noqa: E402
from bakery.formats.onnx_export import export_onnx_bytes  # noqa: E402
from bakery.formats.reader import read_bundle  # noqa: E402
from bakery.nn.activations import ACTIVATIONS  # noqa: E402
from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding  # noqa: E402
from bakery.nn.network import NetworkSpec  # noqa: E402

FP16_TOL = 2e-3


def _run(model_bytes: bytes, x: np.ndarray) -> np.ndarray:
    model = onnx.load_from_string(model_bytes)
    onnx.checker.check_model(model, full_check=True)
    return ReferenceEvaluator(model).run(None, {"inputs": x.astype(np.float32)})[0]


@pytest.mark.parametrize("hidden_act", [a for a in ACTIVATIONS if a != "exp"])
def test_matches_numpy_forward_for_each_activation(hidden_act):
    spec = NetworkSpec(FrequencyEncoding(2, 5), (32, 16), 3, hidden_act, "sigmoid")
    params = spec.init_params(3)
    x = np.random.default_rng(1).random((200, 2))
    got = _run(export_onnx_bytes(spec, params), x)
    assert got.shape == (200, 3)
    np.testing.assert_allclose(got, spec.forward(params, x), atol=FP16_TOL, rtol=0)


def test_identity_encoding_and_exp_output():
    spec = NetworkSpec(IdentityEncoding(6), (8,), 2, "relu", "exp")
    params = spec.init_params(0)
    x = np.random.default_rng(2).standard_normal((50, 6))
    np.testing.assert_allclose(_run(export_onnx_bytes(spec, params), x), spec.forward(params, x), rtol=FP16_TOL)


def test_encoding_order_is_sin_block_then_cos_block():
    """A network whose first layer picks single encoding features exposes the order."""
    spec = NetworkSpec(FrequencyEncoding(2, 3), (), 12, "relu", "identity")
    params = np.zeros(spec.param_count, np.float32)
    params[:144] = np.eye(12, dtype=np.float32).ravel()
    x = np.array([[0.1, 0.3]])
    got = _run(export_onnx_bytes(spec, params), x)[0]
    want = [np.sin(2 * np.pi * 2 ** k * 0.1) for k in range(3)] + [np.cos(2 * np.pi * 2 ** k * 0.1) for k in range(3)]
    np.testing.assert_allclose(got[:6], want, atol=1e-5)


def test_bundle_writes_decoder_onnx_from_stored_fp16_weights(tmp_path):
    spec = NetworkSpec(FrequencyEncoding(2, 4), (16,), 3)
    params = spec.init_params(8)
    w = BundleWriter(tmp_path / "b")
    w.write_weights("weights.bin", spec, params)
    w.write_decoder_artifacts(spec, params=params)
    w.finalize({"stage": {"type": "t", "version": "1"}, "params": {}, "seed": 0, "device": {}, "metrics": {}})
    b = read_bundle(tmp_path / "b")
    assert {f["name"] for f in b.manifest["files"]} >= {"decoder.onnx", "decoder.slang", "decoder.hlsl", "decoder.glsl"}
    x = np.random.default_rng(3).random((40, 2))
    got = _run(b.files["decoder.onnx"], x)
    np.testing.assert_allclose(got, b.decode(x), atol=1e-5, rtol=0)            # same fp16-rounded weights
    np.testing.assert_allclose(got, spec.forward(params, x), atol=FP16_TOL, rtol=0)
    assert export_onnx_bytes(spec, b.params) == b.files["decoder.onnx"]       # deterministic
