"""weights.bin: exact layout, round trips per dtype, and refusal of damaged files."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from bakery.formats.errors import BundleError
from bakery.formats.weights import decode_weights, encode_weights, layout
from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding
from bakery.nn.network import NetworkSpec

SPEC = NetworkSpec(FrequencyEncoding(2, 3), (13, 7), 3, hidden_activation="leaky_relu", output_activation="sigmoid")


@pytest.mark.parametrize("dtype,np_dtype", [("float16", "<f2"), ("float32", "<f4")])
def test_round_trip_and_byte_layout(dtype, np_dtype):
    params = SPEC.init_params(3)
    data = encode_weights(SPEC, params, dtype)
    magic, version, code, n_layers, total = struct.unpack_from("<4sHHII", data, 0)
    assert (magic, version, code, n_layers, total) == (b"BKNN", 1, 1 if dtype == "float16" else 2, 3, len(data))
    assert len(data) % 16 == 0
    layers, _ = layout(SPEC, dtype)
    for i, ((w, b), lay) in enumerate(zip(SPEC.split(params), layers)):
        rec = struct.unpack_from("<8I", data, 16 + 32 * i)
        assert rec == (lay.n_in, lay.n_out, {"leaky_relu": 1, "sigmoid": 3}[lay.activation], 0,
                       lay.weight_offset, lay.weight_bytes, lay.bias_offset, lay.bias_bytes)
        assert lay.weight_offset % 64 == 0 and lay.bias_offset % 16 == 0
        stored_w = np.frombuffer(data, np_dtype, w.size, lay.weight_offset).reshape(lay.n_out, lay.n_in)
        np.testing.assert_array_equal(stored_w, w.astype(np_dtype))       # row-major [out][in]
        np.testing.assert_array_equal(np.frombuffer(data, np_dtype, b.size, lay.bias_offset), b.astype(np_dtype))
    wf = decode_weights(data)
    assert wf.dtype == dtype and wf.matches(SPEC)
    np.testing.assert_array_equal(wf.params, params.astype(np_dtype).astype(np.float32))
    # padding is zero, so files are deterministic
    used = np.zeros(len(data), bool)
    used[:16 + 32 * 3] = True
    for lay in layers:
        used[lay.weight_offset:lay.weight_offset + lay.weight_bytes] = True
        used[lay.bias_offset:lay.bias_offset + lay.bias_bytes] = True
    assert not any(np.frombuffer(data, np.uint8)[~used])


def test_identity_encoding_and_fp32_exact():
    spec = NetworkSpec(IdentityEncoding(5), (), 2)
    p = spec.init_params(1)
    assert np.array_equal(decode_weights(encode_weights(spec, p, "float32")).params, p)


def test_writer_refuses_nonfinite_and_fp16_overflow():
    p = SPEC.init_params(0)
    p[4] = np.nan
    with pytest.raises(ValueError):
        encode_weights(SPEC, p)
    p[4] = 1e6
    with pytest.raises(ValueError, match="float32"):
        encode_weights(SPEC, p, "float16")
    encode_weights(SPEC, p, "float32")


def _patched(data: bytes, offset: int, fmt: str, value) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


GOOD = encode_weights(SPEC, SPEC.init_params(0))


@pytest.mark.parametrize("bad,message", [
    (GOOD[:10], "truncated"),
    (GOOD[:-16], "size mismatch"),
    (b"XXXX" + GOOD[4:], "magic"),
    (_patched(GOOD, 4, "<H", 9), "version"),
    (_patched(GOOD, 6, "<H", 7), "dtype"),
    (_patched(GOOD, 8, "<I", 0), "layer count"),
    (_patched(GOOD, 16 + 8, "<I", 77), "activation"),
    (_patched(GOOD, 16 + 32 + 0, "<I", 5), "inputs"),
    (_patched(GOOD, 16 + 16, "<I", 65), "misaligned"),
    (_patched(GOOD, 16 + 20, "<I", 4), "byte counts"),
    (_patched(GOOD, 16 + 16, "<I", 0), "overlaps"),
])
def test_damaged_files_give_one_line_error_naming_the_file(bad, message):
    with pytest.raises(BundleError, match=message) as e:
        decode_weights(bad, where="out/a/weights.bin")
    assert str(e.value).startswith("out/a/weights.bin: ") and "\n" not in str(e.value)


def test_nan_in_file_is_refused():
    lay = layout(SPEC)[0][0]
    bad = _patched(GOOD, lay.weight_offset, "<H", 0x7E00)   # fp16 NaN
    with pytest.raises(BundleError, match="NaN"):
        decode_weights(bad)
