"""Network parameters on the device, in the form each MLP backend consumes.

Portable backend: the canonical fp32 array as is, gradients as 64-bit fixed point.
CoopVec backend: fp16 weights in the device's TrainingOptimal layout (bias vectors
plain), gradients in slices (fp16 weights in the same layout, fp32 biases; see
bakery/nn/mlp_coopvec.slang), fp32 master weights in canonical order. Optimal layouts are opaque and device-specific, so they are never
stored: at load we learn where each canonical element lands by converting
index-coded matrices once, and from then on moving parameters in or out is a gather.
The optimizer state (Adam m, v) is in canonical order on both backends.
"""

from __future__ import annotations

import numpy as np

from bakery.nn.network import NetworkSpec

#: Units of the portable gradient accumulator (see bakery/nn/mlp_portable.slang).
FIXED_POINT_SCALE = float(2 ** 40)
#: Loss scale and gradient slice count of the CoopVec backend (bakery/nn/mlp_coopvec.slang).
COOPVEC_LOSS_SCALE = 256.0
COOPVEC_GRAD_SLICES = 64
#: Marks a gradient position as fp32 (bias) rather than fp16 (weight).
FP32_FLAG = 0x80000000


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _usage():
    import slangpy as spy

    return (spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
            | spy.BufferUsage.copy_source | spy.BufferUsage.copy_destination)


def make_buffer(device, data: np.ndarray):
    """A read/write device buffer initialised from ``data`` (any dtype, raw bytes)."""
    data = np.ascontiguousarray(data)
    if not data.flags.writeable:  # slangpy takes only writable arrays
        data = data.copy()
    return device.spy.create_buffer(size=max(data.nbytes, 16), usage=_usage(),
                                    data=data if data.nbytes >= 16 else np.pad(data.view(np.uint8), (0, 16 - data.nbytes)))


class ParameterStore:
    """Owns a network's parameter, gradient and optimizer buffers on one device."""

    def __init__(self, device, spec: NetworkSpec):
        self.device = device
        self.spec = spec
        self.coopvec = device.coopvec
        n = spec.param_count
        self.adam_m = make_buffer(device, np.zeros(n, np.float32))
        self.adam_v = make_buffer(device, np.zeros(n, np.float32))
        if self.coopvec:
            self._init_coopvec()
        else:
            self.params = make_buffer(device, np.zeros(n, np.float32))
            self.grads = make_buffer(device, np.zeros(n, np.uint64))
            self.grad_scale = 1.0 / FIXED_POINT_SCALE
            self.linear_args = [f"{l.weight_offset}, {l.bias_offset}" for l in spec.layers]

    # -- CoopVec layout ---------------------------------------------------------------
    def _positions(self, rows: int, cols: int, dtype) -> tuple[np.ndarray, int]:
        """Element position of each row-major index in the TrainingOptimal layout."""
        import slangpy as spy

        dev = self.device.spy
        elem = spy.DataType.float16 if dtype == np.float16 else spy.DataType.float32
        size = dev.get_coop_vec_matrix_size(rows, cols, spy.CoopVecMatrixLayout.training_optimal, elem)
        count = size // np.dtype(dtype).itemsize
        idx = np.arange(rows * cols)
        # fp16 holds integers exactly only up to 2048: code the index in two digits.
        digits = [(idx % 1024) + 1, (idx // 1024) + 1] if dtype == np.float16 else [idx + 1]
        decoded = np.zeros(count, np.int64)
        present = np.ones(count, bool)
        for k, d in enumerate(digits):
            dst = np.zeros(count, dtype)
            dev.convert_coop_vec_matrix(dst, d.reshape(rows, cols).astype(dtype),
                                        dst_layout=spy.CoopVecMatrixLayout.training_optimal)
            present &= dst != 0  # padding converts to 0; every coded digit is >= 1
            decoded += (dst.astype(np.int64) - 1) * (1024 ** k)
        slots = np.flatnonzero(present)
        pos = np.full(rows * cols, -1, np.int64)
        pos[decoded[slots]] = slots
        if (pos < 0).any() or len(slots) != rows * cols:
            raise RuntimeError("cooperative-vector layout conversion lost elements")
        return pos, size

    def _init_coopvec(self):
        spec = self.spec
        weight_pos = np.zeros(spec.param_count, np.uint32)
        grad_pos = np.zeros(spec.param_count, np.uint32)
        w16 = g = 0
        self.linear_args = []
        for l in spec.layers:
            wpos, wsize = self._positions(l.n_out, l.n_in, np.float16)
            wo, go = _align(w16, 64), _align(g, 64)
            bo, gbo = _align(wo + wsize, 16), _align(go + wsize, 16)
            weight_pos[l.weight_offset:l.bias_offset] = wo + 2 * wpos
            grad_pos[l.weight_offset:l.bias_offset] = go + 2 * wpos
            weight_pos[l.bias_offset:l.bias_offset + l.n_out] = bo + 2 * np.arange(l.n_out)
            grad_pos[l.bias_offset:l.bias_offset + l.n_out] = (gbo + 4 * np.arange(l.n_out)) | FP32_FLAG
            w16, g = bo + 2 * l.n_out, gbo + 4 * l.n_out
            self.linear_args.append(f"{wo}, {bo}, {go}, {gbo}")
        self.slice_bytes = _align(g, 64)
        self.weight_pos_host = weight_pos
        self.weights16 = make_buffer(self.device, np.zeros(_align(w16, 16), np.uint8))
        half_owner = np.full(self.weights16.size // 2, 0xFFFFFFFF, np.uint32)
        half_owner[weight_pos // 2] = np.arange(spec.param_count, dtype=np.uint32)
        self.weight_words = self.weights16.size // 4
        self.grads32 = make_buffer(self.device, np.zeros(self.slice_bytes * COOPVEC_GRAD_SLICES, np.uint8))
        self.master = make_buffer(self.device, np.zeros(spec.param_count, np.float32))
        self.half_owner = make_buffer(self.device, half_owner)
        self.grad_pos = make_buffer(self.device, grad_pos)
        self.grad_scale = 1.0 / COOPVEC_LOSS_SCALE

    # -- moving parameters ------------------------------------------------------------
    def upload(self, canonical: np.ndarray) -> None:
        canonical = np.asarray(canonical, np.float32)
        if self.coopvec:
            self.master.copy_from_numpy(canonical)
            w = np.zeros(self.weights16.size // 2, np.float16)
            w[self.weight_pos_host // 2] = canonical.astype(np.float16)
            self.weights16.copy_from_numpy(w)
        else:
            self.params.copy_from_numpy(canonical)

    def download(self) -> np.ndarray:
        buf = self.master if self.coopvec else self.params
        return buf.to_numpy().view(np.float32)[: self.spec.param_count].copy()

    def optimizer_state(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.spec.param_count
        return (self.adam_m.to_numpy().view(np.float32)[:n].copy(),
                self.adam_v.to_numpy().view(np.float32)[:n].copy())

    def set_optimizer_state(self, m: np.ndarray, v: np.ndarray) -> None:
        self.adam_m.copy_from_numpy(np.asarray(m, np.float32))
        self.adam_v.copy_from_numpy(np.asarray(v, np.float32))

    def defines(self) -> str:
        """Compile-time settings the network and optimizer code must agree on."""
        if self.coopvec:
            return f"#define BK_GRAD_SLICE_BYTES {self.slice_bytes}\n"
        return ""

    def network_vars(self) -> dict:
        """Bindings the network's forward/backward pass reads and accumulates into."""
        if self.coopvec:
            return {"g_weights16": self.weights16, "g_grads32": self.grads32}
        return {"g_params": self.params, "g_grads": self.grads}

    def optimizer_vars(self) -> dict:
        v = dict(self.network_vars(), g_adam_m=self.adam_m, g_adam_v=self.adam_v)
        if self.coopvec:
            v.update(g_master=self.master, g_grad_pos=self.grad_pos, g_half_owner=self.half_owner)
        return v

    def gradients(self) -> np.ndarray:
        """The accumulated gradient in canonical order (d loss / d parameter); for tests."""
        n = self.spec.param_count
        if self.coopvec:
            raw = self.grads32.to_numpy().view(np.uint8).reshape(COOPVEC_GRAD_SLICES, self.slice_bytes)
            pos = self.grad_pos.to_numpy().view(np.uint32)[:n]
            is32 = (pos & FP32_FLAG) != 0
            pos = pos & ~np.uint32(FP32_FLAG)
            total = np.zeros(n, np.float64)
            for sl in raw:
                total[is32] += sl.view(np.float32)[pos[is32] // 4]
                total[~is32] += sl.view(np.float16)[pos[~is32] // 2]
            return total * self.grad_scale
        return self.grads.to_numpy().view(np.int64)[:n].astype(np.float64) * self.grad_scale


class PlainParameters:
    """A flat fp32 parameter group outside the network (latent grids, shader inputs).

    Gradients are 64-bit fixed point on every backend (see bakery/nn/fixed_point.slang);
    Adam, AdamW or AMSGrad runs from bakery/nn/adam_plain.slang with the group's own
    learning rate and clamps values to [lo, hi] after each update.
    """

    def __init__(self, device, values: np.ndarray, *, lr: float, lo: float = -3.0e38, hi: float = 3.0e38):
        values = np.ascontiguousarray(values, np.float32).reshape(-1)
        self.count, self.lr, self.lo, self.hi = values.size, float(lr), float(lo), float(hi)
        self.params = make_buffer(device, values)
        self.grads = make_buffer(device, np.zeros(self.count, np.uint64))
        self.adam_m = make_buffer(device, np.zeros(self.count, np.float32))
        self.adam_v = make_buffer(device, np.zeros(self.count, np.float32))
        self.adam_vmax = make_buffer(device, np.zeros(self.count, np.float32))  # AMSGrad's max of v
        self.grad_scale = 1.0 / FIXED_POINT_SCALE

    def download(self) -> np.ndarray:
        return self.params.to_numpy().view(np.float32)[: self.count].copy()

    def upload(self, values: np.ndarray) -> None:
        self.params.copy_from_numpy(np.ascontiguousarray(values, np.float32).reshape(-1))

    def gradients(self) -> np.ndarray:
        return self.grads.to_numpy().view(np.int64)[: self.count].astype(np.float64) * self.grad_scale

    def optimizer_vars(self) -> dict:
        return {"g_plain_params": self.params, "g_plain_grads": self.grads,
                "g_plain_m": self.adam_m, "g_plain_v": self.adam_v, "g_plain_vmax": self.adam_vmax}
