"""``weights.bin``: a network's parameters in the layout GPU runtimes load directly.

Little-endian. A fixed 16-byte header, a 32-byte record per layer, then the data:
each matrix row-major ``[out][in]`` starting on a 64-byte boundary, each bias right
after its matrix on a 16-byte boundary, zero padding between (the RTXNS convention,
so a runtime can hand each matrix to a cooperative-vector layout conversion as-is).
The header repeats every size and offset so a loader can check a file before trusting
it. See docs/FORMAT.md for the byte table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from bakery.formats.errors import BundleError
from bakery.nn.activations import TABLE as ACTIVATION_TABLE
from bakery.nn.network import NetworkSpec

MAGIC = b"BKNN"
VERSION = 1
HEADER = struct.Struct("<4sHHII")        # magic, version, dtype code, layer count, file bytes
LAYER = struct.Struct("<8I")             # n_in, n_out, activation, reserved, w_off, w_bytes, b_off, b_bytes
MATRIX_ALIGN = 64
BIAS_ALIGN = 16
END_ALIGN = 16

DTYPES = {"float16": (1, np.dtype("<f2")), "float32": (2, np.dtype("<f4"))}
DTYPE_BY_CODE = {code: (name, dt) for name, (code, dt) in DTYPES.items()}

#: Fixed on-disk ids, from the activation table (bakery.nn.activations); never renumbered.
ACTIVATION_IDS = {a.name: a.file_id for a in ACTIVATION_TABLE.values()}
ACTIVATION_BY_ID = {v: k for k, v in ACTIVATION_IDS.items()}


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class LayerLayout:
    """Where one layer's matrix and bias live in ``weights.bin`` (byte offsets from file start)."""

    n_in: int
    n_out: int
    activation: str
    weight_offset: int
    weight_bytes: int
    bias_offset: int
    bias_bytes: int


def layout(spec: NetworkSpec, dtype: str = "float16") -> tuple[list[LayerLayout], int]:
    """Per-layer byte layout and total file size for ``spec`` stored as ``dtype``."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown weights dtype {dtype!r} (known: {', '.join(DTYPES)})")
    item = DTYPES[dtype][1].itemsize
    pos = HEADER.size + LAYER.size * len(spec.layers)
    out = []
    for l in spec.layers:
        w_off = _align(pos, MATRIX_ALIGN)
        w_bytes = l.n_in * l.n_out * item
        b_off = _align(w_off + w_bytes, BIAS_ALIGN)
        b_bytes = l.n_out * item
        out.append(LayerLayout(l.n_in, l.n_out, l.activation, w_off, w_bytes, b_off, b_bytes))
        pos = b_off + b_bytes
    return out, _align(pos, END_ALIGN)


def encode_weights(spec: NetworkSpec, params: np.ndarray, dtype: str = "float16") -> bytes:
    """``weights.bin`` bytes from the canonical flat fp32 parameter array."""
    layers, total = layout(spec, dtype)
    code, np_dtype = DTYPES[dtype]
    params = np.asarray(params, dtype=np.float32)
    if not np.all(np.isfinite(params)):
        raise ValueError("network parameters contain NaN or infinity")
    if dtype == "float16" and np.any(np.abs(params) > np.finfo(np.float16).max):
        raise ValueError("network parameters overflow float16; store them as float32")
    buf = bytearray(total)
    HEADER.pack_into(buf, 0, MAGIC, VERSION, code, len(layers), total)
    for i, (lay, (w, b)) in enumerate(zip(layers, spec.split(params))):
        LAYER.pack_into(buf, HEADER.size + i * LAYER.size, lay.n_in, lay.n_out, ACTIVATION_IDS[lay.activation],
                        0, lay.weight_offset, lay.weight_bytes, lay.bias_offset, lay.bias_bytes)
        buf[lay.weight_offset:lay.weight_offset + lay.weight_bytes] = np.ascontiguousarray(w, dtype=np_dtype).tobytes()
        buf[lay.bias_offset:lay.bias_offset + lay.bias_bytes] = np.ascontiguousarray(b, dtype=np_dtype).tobytes()
    return bytes(buf)


@dataclass(frozen=True)
class WeightsFile:
    """A checked ``weights.bin``: its dtype, layer layout and canonical fp32 parameters."""

    dtype: str
    layers: tuple[LayerLayout, ...]
    params: np.ndarray

    def matches(self, spec: NetworkSpec) -> bool:
        got = [(l.n_in, l.n_out, l.activation) for l in self.layers]
        want = [(l.n_in, l.n_out, l.activation) for l in spec.layers]
        return got == want


def decode_weights(data: bytes, *, where: str = "weights.bin") -> WeightsFile:
    """Parses and checks ``weights.bin``; any inconsistency raises :class:`BundleError`."""
    def bad(msg: str):
        return BundleError(msg, where=where)

    if len(data) < HEADER.size:
        raise bad(f"truncated: {len(data)} bytes, header needs {HEADER.size}")
    magic, version, code, n_layers, total = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise bad(f"wrong magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise bad(f"unsupported weights version {version} (this reader knows {VERSION})")
    if code not in DTYPE_BY_CODE:
        raise bad(f"unknown dtype code {code}")
    if total != len(data):
        raise bad(f"size mismatch: header says {total} bytes, file has {len(data)}")
    if not 1 <= n_layers <= 1024 or HEADER.size + n_layers * LAYER.size > len(data):
        raise bad(f"implausible layer count {n_layers}")
    dtype, np_dtype = DTYPE_BY_CODE[code]
    item = np_dtype.itemsize
    layers, chunks = [], []
    prev_end, prev_out = HEADER.size + n_layers * LAYER.size, None
    for i in range(n_layers):
        n_in, n_out, act, reserved, w_off, w_bytes, b_off, b_bytes = LAYER.unpack_from(data, HEADER.size + i * LAYER.size)
        what = f"layer {i}"
        if act not in ACTIVATION_BY_ID or reserved != 0:
            raise bad(f"{what}: unknown activation id {act}" if act not in ACTIVATION_BY_ID else f"{what}: reserved field is {reserved}")
        if not (1 <= n_in <= 65536 and 1 <= n_out <= 65536):
            raise bad(f"{what}: implausible size {n_in}x{n_out}")
        if prev_out is not None and n_in != prev_out:
            raise bad(f"{what}: takes {n_in} inputs but the previous layer gives {prev_out}")
        if w_off % MATRIX_ALIGN or b_off % BIAS_ALIGN:
            raise bad(f"{what}: misaligned data (matrix at {w_off}, bias at {b_off})")
        if w_bytes != n_in * n_out * item or b_bytes != n_out * item:
            raise bad(f"{what}: byte counts {w_bytes}/{b_bytes} do not match {n_out}x{n_in} {dtype}")
        if w_off < prev_end or b_off < w_off + w_bytes or b_off + b_bytes > len(data):
            raise bad(f"{what}: data overlaps or runs past the end of the file")
        w = np.frombuffer(data, dtype=np_dtype, count=n_in * n_out, offset=w_off)
        b = np.frombuffer(data, dtype=np_dtype, count=n_out, offset=b_off)
        chunks += [w, b]
        layers.append(LayerLayout(n_in, n_out, ACTIVATION_BY_ID[act], w_off, w_bytes, b_off, b_bytes))
        prev_end, prev_out = b_off + b_bytes, n_out
    params = np.concatenate(chunks).astype(np.float32)
    if not np.all(np.isfinite(params)):
        raise bad("parameters contain NaN or infinity")
    return WeightsFile(dtype, tuple(layers), params)
