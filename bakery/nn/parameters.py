"""Network parameters on the device, in the form each MLP backend consumes.

Portable backend: the canonical fp32 array as is, gradients as 64-bit fixed point.
CoopVec backend: fp16 weights in the device's TrainingOptimal layout (bias vectors
plain), fp32 master weights in canonical order, gradient parts in canonical order
(one fp32 slice per training workgroup, or one 64-bit fixed-point buffer added atomically; see
bakery/nn/mlp_coopvec.slang) and the dynamic loss-scale state. Optimal layouts are
opaque and device-specific, so they are never stored: at load we learn where each canonical element lands by converting
index-coded matrices once, and from then on moving parameters in or out is a gather.
The optimizer state (Adam m, v) is in canonical order on both backends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bakery.nn.network import NetworkSpec

#: Groupshared bytes the warp copies of split-K rows may take (row_copy): NVIDIA's Vulkan
#: driver offers 48 KiB a workgroup, and the objectives keep some for themselves.
ROW_COPY_SHARED_BYTES = 24576

#: Units of the portable gradient accumulator (see bakery/nn/mlp_portable.slang).
FIXED_POINT_SCALE = float(2 ** 40)


@dataclass(frozen=True)
class CoopVecReduction:
    """How the CoopVec backend reduces weight gradients (bakery/nn/mlp_coopvec.slang): the
    two designs the product ships, default_reduction choosing by the device. The designs
    measured against them (other stagings and sums, fp32 atomics, transposed weight copies,
    a backward pass on cooperative matrices) are recorded in bench/HISTORY.md.

    ``group``: threads per training workgroup (samples per tile); ``max_groups``: the
    persistent workgroups a step runs at most (default_reduction: two per multiprocessor);
    ``mode``: "slices" (each workgroup stages its samples in groupshared memory, ``stage``
    at a time, sums its own fp32 slice of the gradient and the optimizer sums the slices)
    or "splitk" (the training kernel stores each sample's layer inputs and output
    gradients; a second kernel sums them on cooperative matrices, which needs the device's
    Feature.cooperative_matrix, and adds them in 64-bit fixed point: order-independent);
    ``unroll``: split-K sample blocks whose loads are issued together; ``reduce_groups``:
    split-K's reduction workgroups per layer (0: ``max_groups``); ``generated_backward``:
    each network's backward pass as nn/codegen.py writes it out (the layers in reverse from
    the outputs its forward kept: one forward per training sample where the objective can,
    BK_KEPT; ``Network.forward_kept``) rather than as Slang's autodiff derives it;
    ``row_block``: split-K's stored rows interleaved over blocks of this many samples: each
    layer's x (then dy) of the block's samples lie together, so that consecutive samples'
    stores land side by side (1: one whole row per sample; above 1: a multiple of 16
    dividing ``group``); ``row_copy``: each warp stages its samples' rows in groupshared
    memory and copies them out 16 bytes per lane, whole cache lines at a time, rather than
    each thread storing its own vectors (needs ``row_block`` a multiple of 32 for the
    copies to cover whole lines); ``row_tiles``: within a block, each slot's 16-wide column
    groups lie one after another, each the block's samples' 32 bytes in turn, so that a
    tile the cooperative-matrix sum loads is 512 contiguous bytes rather than 16 pieces of
    32 a slot's width apart (needs ``row_copy``).
    """

    group: int = 256
    max_groups: int = 264
    mode: str = "slices"
    stage: int = 64
    unroll: int = 1  # split-K: sample blocks whose loads the reduction issues together
    reduce_groups: int = 0
    generated_backward: bool = False
    row_block: int = 1
    row_copy: bool = False
    row_tiles: bool = False

    def __post_init__(self):
        if self.mode not in ("slices", "splitk"):
            raise ValueError(f"unknown gradient reduction mode {self.mode!r} (known: slices, splitk)")
        if self.group % self.stage:
            raise ValueError("group must be a multiple of stage")
        if self.mode == "splitk" and self.group % 64:
            raise ValueError("split-K needs a workgroup of a multiple of 64 threads")
        if self.row_block < 1 or self.group % self.row_block or (self.row_block > 1 and self.row_block % 16):
            raise ValueError(f"row_block {self.row_block}: divides group {self.group}, and is 1 or a multiple of 16")
        if self.row_block > 1 and self.mode != "splitk":
            raise ValueError(f"row_block {self.row_block}: only split-K stores rows (mode 'splitk')")
        if self.row_copy and (self.mode != "splitk" or self.row_block % 32):
            raise ValueError("row_copy needs mode 'splitk' and a row_block that is a multiple of 32 "
                             "(a warp's copies then write whole lines)")
        if self.row_tiles and not self.row_copy:
            raise ValueError("row_tiles needs row_copy (the warp copies write the column groups)")

    @property
    def split_k_groups(self) -> int:
        """Workgroups per layer of the split-K reduction dispatch."""
        return self.reduce_groups or self.max_groups


#: Halfs each layer's x or dy segment of a stored split-K row is padded to: whole 16 x 16
#: tiles of the cooperative-matrix sum (and whole column groups for row_tiles).
ROW_ALIGN = 16


#: Partial sums one weight gradient may receive in the CoopVec backend's 64-bit fixed point
#: (nn/mlp_coopvec.slang: BK_GRAD_FIXED_LIMIT keeps each under 2^13 at 2^40 per unit, so
#: 2^10 of them stay inside an int64). Workgroups sized from a device's multiprocessors are
#: capped at this, so a GPU with more of them cannot overflow the sum.
FIXED_POINT_PARTIALS = 1 << 10


def default_reduction(device, spec) -> CoopVecReduction:
    """The reduction a device gets (bench/grad_reduction.py times the alternatives):
    split-K on cooperative matrices where the device has them, else per-workgroup slices;
    both sized from the device's multiprocessors where its driver reports them
    (Device.sm_count): two persistent training workgroups and one split-K reduction
    workgroup per multiprocessor (on the H200's 132: 264 and 132, the best of 64/132/264
    reduction workgroups measured). With cooperative matrices, 128-thread training
    workgroups (GPU 458 against 519 µs per step on the texture fit; NTC at 8 bpp 33.98
    against 33.85 dB, same run) wherever every layer has at most 64 outputs, the widths
    measured, else 256 (wider layers at 128 threads would give each warp of the split-K
    sum twice the accumulator tiles: unmeasured, likely spilling). The backward pass stays
    per-sample CoopVec (as cooperative-matrix tiles it measured slower), written out by
    nn/codegen.py rather than derived by Slang's autodiff: the texture fit's training kernel
    took 319.5 against 323.1 and 310.4 against 315.1 µs in two runs, with the same
    gradients (measured on the 64-wide network; wider ones take it unmeasured). Its split-K
    rows lie in blocks of 32 samples, each warp copying them out whole lines at a time:
    that kernel took 156.5 against 320.7 µs with rows stored per thread (same run, same
    gradients; blocks alone 253.4, blocks of 128 with copies 157.0), where the copies'
    groupshared rows fit (row_copy_bytes: up to 64-wide layers at 128 threads); and there
    each block's slots lie column group by column group (row_tiles), so the sum loads whole
    512-byte tiles: sum 90.7 against 111.2 µs, training kernel 160.7 against 156.3 (the
    texture fit, same run; NTC's sum 90.4 against 101.7: bench/RESULTS.md, grad_reduction)."""
    sms = getattr(device, "sm_count", None)
    if sms:
        sms = min(sms, FIXED_POINT_PARTIALS // 2)
    sized = {"max_groups": 2 * sms} if sms else {}
    if getattr(device, "coopmat", False):
        narrow = all(l.n_out <= 64 for l in spec.layers)
        group = 128 if narrow else 256
        copies = row_copy_bytes(spec, group) <= ROW_COPY_SHARED_BYTES
        return CoopVecReduction(group=group, mode="splitk", reduce_groups=sms or 0, unroll=2,
                                generated_backward=True, row_block=32, row_copy=copies, row_tiles=copies, **sized)
    return CoopVecReduction(**sized)


#: Dynamic loss scaling (CoopVec): the start, the cap, and the finite steps before doubling.
LOSS_SCALE_INIT = 1024.0
LOSS_SCALE_MAX = 65536.0
LOSS_SCALE_INTERVAL = 200


def _copy_row_groups(slot_bytes: int) -> int:
    """16-byte groups of one row_copy staging row for slots up to ``slot_bytes``: an odd
    count, so neighbouring rows start in different banks (BK_ACTS_ROWQ)."""
    return slot_bytes // 16 | 1


def row_copy_bytes(spec, group: int) -> int:
    """Groupshared bytes of row_copy's staging rows (bk_act_rows): one row per thread of
    the widest layer side, its slots padded to ROW_ALIGN halfs."""
    widest = max(max(_align(l.n_in, ROW_ALIGN), _align(l.n_out, ROW_ALIGN)) for l in spec.layers)
    return group * _copy_row_groups(2 * widest) * 16


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _inputs_per_thread(n_in: int, n_out: int, group: int, split_k: bool) -> int:
    """Weights of one row a training thread owns (BkOwnership in mlp_coopvec.slang): the
    row's inputs split over group // n_out threads. Split-K kernels own none (they only
    zero the accumulators in bk_train_begin); they are sized there in whole groups of 8, so
    that their code stays as measured."""
    ci = -(-n_in // (group // n_out))
    return -(-ci // 8) * 8 if split_k else ci


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


def output_buffer(device, nbytes: int):
    """A read/write device buffer left uninitialised: for outputs a kernel writes in full
    before they are read (no upload of zeros; a procedural search's renders are hundreds of
    megabytes a generation)."""
    return device.spy.create_buffer(size=max(int(nbytes), 16), usage=_usage())


def read_back(device, buffer, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of a device buffer, as a fresh byte array. Reading a buffer copies
    all of it to the host, so where only a part is wanted (a small mip out of a buffer sized
    for mip 0: 671 MB for a 4096² NTC set) the part is first copied on the device into a
    buffer of its own size."""
    nbytes = int(nbytes)
    if nbytes >= buffer.size:
        return buffer.to_numpy().view(np.uint8)[:nbytes]
    part = output_buffer(device, nbytes)
    device.submit(lambda encoder: encoder.copy_buffer(part, 0, buffer, 0, nbytes))
    return part.to_numpy().view(np.uint8)[:nbytes]


#: Tiles of 64 samples each portable training workgroup runs on a CPU device, summing its
#: threads' weight gradients in private memory before adding them: atomics cost lavapipe
#: three quarters of a step, private memory is ordinary memory there (mlp_portable.slang).
#: At most CPU_TILES_PER_GROUP, and fewer where that would leave under CPU_MIN_GROUPS
#: workgroups for the CPU's threads (from the batch alone, so results never depend on the
#: machine's core count). Up to CPU_PRIVATE_MAX_PARAMS: LLVM compiles a larger private array
#: slowly (a 56k-parameter ntc decoder took 92 s for 5 steps, against 31 s with per-sample
#: atomics; at 7.5k the private sums train 1.6x faster for 4 s more compile).
CPU_TILES_PER_GROUP = 8
CPU_MIN_GROUPS = 8
CPU_PRIVATE_MAX_PARAMS = 16384


def cpu_tiles_per_group(batch: int) -> int:
    """Tiles per workgroup of a CPU device's private gradient sums for ``batch`` samples."""
    return max(1, min(CPU_TILES_PER_GROUP, -(-batch // 64) // CPU_MIN_GROUPS))


class ParameterStore:
    """Owns a network's parameter, gradient and optimizer buffers on one device."""

    def __init__(self, device, spec: NetworkSpec, *, input_gradients: bool = True,
                 reduction: CoopVecReduction | None = None, batch: int = 1 << 16):
        self.device = device
        self.spec = spec
        self.coopvec = device.coopvec
        self.input_gradients = input_gradients
        self.reduction = reduction or default_reduction(device, spec)
        private = not self.coopvec and device.info.software and spec.param_count <= CPU_PRIVATE_MAX_PARAMS
        self.tiles_per_group = cpu_tiles_per_group(batch) if private else 1
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
        spec, red = self.spec, self.reduction
        weight_pos = np.zeros(spec.param_count, np.uint32)
        w16 = acc = row = 0
        self.row_slots = []  # (byte offset in a logical row, bytes): every layer's x, then its dy
        layout = []  # per layer: Linear's template arguments after I, O
        for k, l in enumerate(spec.layers):
            if l.n_out > red.group:
                raise ValueError(f"layer {k}: {l.n_out} outputs exceed the {red.group}-thread workgroup")
            wpos, wsize = self._positions(l.n_out, l.n_in, np.float16)
            wo = _align(w16, 64)
            bo = _align(wo + wsize, 16)
            weight_pos[l.weight_offset:l.bias_offset] = wo + 2 * wpos
            weight_pos[l.bias_offset:l.bias_offset + l.n_out] = bo + 2 * np.arange(l.n_out)
            w16 = bo + 2 * l.n_out
            dx = int(self.input_gradients or k > 0)
            pad = ROW_ALIGN
            xo, do = row, row + 2 * _align(l.n_in, pad)  # this layer's x and dy in a g_acts row
            row = do + 2 * _align(l.n_out, pad)
            self.row_slots += [(xo, 2 * _align(l.n_in, pad)), (do, 2 * _align(l.n_out, pad))]
            layout.append([wo, bo, l.weight_offset, l.bias_offset, acc, dx, xo, do])
            acc += _inputs_per_thread(l.n_in, l.n_out, red.group, red.mode == "splitk") + 1  # and the bias
        self.weight_words = _align(w16, 64) // 4  # the fp16 words adam_step updates
        copy_bytes = row_copy_bytes(spec, red.group)
        if red.row_copy and copy_bytes > ROW_COPY_SHARED_BYTES:
            raise ValueError(f"row_copy: {red.group} threads x rows of the widest layer take {copy_bytes} bytes "
                             f"of groupshared memory (at most {ROW_COPY_SHARED_BYTES}); use row_copy=False "
                             "or a smaller workgroup")
        self.linear_args = [", ".join(str(v) for v in args) for args in layout]
        self.acc_count = acc
        self.row_bytes = row
        self.acts = make_buffer(self.device, np.zeros(row * red.group, np.uint8))
        self.weight_pos_host = weight_pos
        self.weights16 = make_buffer(self.device, np.zeros(4 * self.weight_words, np.uint8))
        half_owner = np.full(self.weights16.size // 2, 0xFFFFFFFF, np.uint32)
        half_owner[weight_pos // 2] = np.arange(spec.param_count, dtype=np.uint32)
        # fp32 slices, or one 64-bit fixed-point sum per parameter (order-independent atomics)
        self.grad_parts = make_buffer(self.device, np.zeros(red.max_groups * spec.param_count, np.float32)
                                      if red.mode == "slices" else np.zeros(spec.param_count, np.int64))
        self.master = make_buffer(self.device, np.zeros(spec.param_count, np.float32))
        self.half_owner = make_buffer(self.device, half_owner)
        self.loss_state = make_buffer(self.device, np.zeros(4, np.float32))
        self.adam_done = make_buffer(self.device, np.zeros(1, np.uint32))  # adam_step's fused loss-scale step
        self.groups = 1  # workgroups of the last training dispatch: the slices that hold parts
        self.reset_loss_scale(1.0)

    def train_groups(self, batch: int) -> int:
        """Workgroups a training dispatch over ``batch`` samples runs (bk_train_groups)."""
        if not self.coopvec:
            return -(-batch // (64 * self.tiles_per_group))
        return min(-(-batch // self.reduction.group), self.reduction.max_groups)

    def reserve_rows(self, batch: int) -> None:
        """Split-K mode: room for the stored activations of ``batch`` samples' whole tiles."""
        rows = -(-batch // self.reduction.group) * self.reduction.group
        if self.coopvec and self.reduction.mode == "splitk" and self.acts.size < rows * self.row_bytes:
            self.acts = make_buffer(self.device, np.zeros(rows * self.row_bytes, np.uint8))

    def device_rows(self, rows: np.ndarray) -> np.ndarray:
        """Split-K rows (one logical row of ``row_bytes`` per sample, as bytes or halfs) in
        the order g_acts holds them (CoopVecReduction.row_block and row_tiles; bk_act_byte)."""
        flat = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), self.row_bytes)
        b = self.reduction.row_block
        if b == 1:
            return flat.copy()
        out = np.zeros((-(-len(rows) // b) * b, self.row_bytes), np.uint8)
        out[:len(rows)] = flat
        blocks = out.reshape(-1, b, self.row_bytes)

        def slot(o, w):  # one slot of every block, its samples in turn or column group by group
            v = blocks[:, :, o:o + w]
            if self.reduction.row_tiles:
                v = v.reshape(len(blocks), b, w // 32, 32).transpose(0, 2, 1, 3)
            return v.reshape(len(blocks), -1)

        return np.concatenate([slot(o, w) for o, w in self.row_slots], axis=1).reshape(-1, self.row_bytes)

    def reset_loss_scale(self, norm: float, scale: float = LOSS_SCALE_INIT) -> None:
        """Starts dynamic loss scaling; ``norm`` is 1 / the objective's grad_scale."""
        self.loss_norm = float(norm)
        if self.coopvec:
            self.loss_state.copy_from_numpy(np.array([scale, scale * norm, 0.0, 0.0], np.float32))

    def loss_scale(self) -> float:
        return float(self.loss_state.to_numpy().view(np.float32)[0]) if self.coopvec else 1.0

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
        if not self.coopvec:
            if self.tiles_per_group == 1:
                return ""
            return "".join(f"#define {k} {v}\n" for k, v in (
                ("BK_PRIVATE_GRADS", 1), ("BK_TILES_PER_GROUP", self.tiles_per_group),
                ("BK_PARAM_COUNT", self.spec.param_count)))
        red, layers = self.reduction, self.spec.layers
        return "".join(f"#define {k} {v}\n" for k, v in (
            ("BK_GROUP", red.group), ("BK_MAX_GROUPS", red.max_groups), ("BK_STAGE", red.stage),
            ("BK_GRAD_MODE", {"slices": 0, "splitk": 2}[red.mode]),
            ("BK_PARAM_COUNT", self.spec.param_count), ("BK_ROW_BYTES", self.row_bytes),
            ("BK_ACC_COUNT", self.acc_count), ("BK_MAX_IN", max(l.n_in for l in layers)),
            ("BK_MAX_OUT", max(l.n_out for l in layers)),
            ("BK_REDUCE_UNROLL", red.unroll),
            ("BK_GEN_BWD", int(red.generated_backward)), ("BK_KEPT", int(red.generated_backward)),
            ("BK_ROW_ALIGN", ROW_ALIGN), ("BK_ACTS_BLOCK", red.row_block), ("BK_ACTS_TILED", int(red.row_tiles)),
            ("BK_ACTS_COPY", int(red.row_copy)),
            ("BK_ACTS_ROWQ", _copy_row_groups(max(w for _, w in self.row_slots)))))

    def network_vars(self) -> dict:
        """Bindings the network's forward/backward pass reads and accumulates into."""
        if self.coopvec:
            return {"g_weights16": self.weights16, "g_grad_parts": self.grad_parts, "g_loss_state": self.loss_state,
                    "g_acts": self.acts}
        return {"g_params": self.params, "g_grads": self.grads}

    def optimizer_vars(self) -> dict:
        v = dict(self.network_vars(), g_adam_m=self.adam_m, g_adam_v=self.adam_v)
        if self.coopvec:
            v.update(g_master=self.master, g_half_owner=self.half_owner, g_adam_done=self.adam_done)
        return v

    def gradients(self) -> np.ndarray:
        """The accumulated gradient in canonical order (d loss / d parameter); for tests."""
        n = self.spec.param_count
        if self.coopvec and self.reduction.mode != "slices":
            return self.grad_parts.to_numpy().view(np.int64)[:n].astype(np.float64) / FIXED_POINT_SCALE
        if self.coopvec:
            parts = self.grad_parts.to_numpy().view(np.float32)[: self.groups * n].reshape(self.groups, n)
            mul = float(self.loss_state.to_numpy().view(np.float32)[1])
            return parts.astype(np.float64).sum(0) / mul
        return self.grads.to_numpy().view(np.int64)[:n].astype(np.float64) * self.grad_scale


class PlainParameters:
    """A flat fp32 parameter group outside the network (latent grids, shader inputs).

    Gradients are 64-bit fixed point on every backend (see bakery/nn/fixed_point.slang);
    Adam, AdamW or AMSGrad runs from bakery/nn/adam_plain.slang with the group's own
    learning rate and clamps values to [lo, hi] after each update. ``lazy``: a step leaves
    parameters with a zero gradient alone, moments included (sparse updates: a batch
    touches a fraction of a large latent grid, and the untouched rest costs one read).
    ``touch_group`` (lazy groups): parameters come in cells of that many, and the kernel
    that adds gradients also marks each cell it adds to in ``touched`` (one word per cell,
    two halves used by alternate steps: the optimizer, a thread per cell, reads step s's
    half and clears the other), so a step reads the gradients of marked cells only: a word
    per cell instead of 8 bytes per parameter for the untouched rest. The same updates, bit
    for bit.
    """

    def __init__(self, device, values: np.ndarray, *, lr: float, lo: float = -3.0e38, hi: float = 3.0e38,
                 lazy: bool = False, touch_group: int = 0):
        values = np.ascontiguousarray(values, np.float32).reshape(-1)
        self.count, self.lr, self.lo, self.hi = values.size, float(lr), float(lo), float(hi)
        self.lazy = bool(lazy)
        if touch_group and (not lazy or self.count % touch_group):
            raise ValueError(f"touch_group {touch_group} needs lazy updates and a whole number of cells")
        self.touch_group = int(touch_group)
        self.cells = self.count // touch_group if touch_group else 0
        self.touched = make_buffer(device, np.zeros(max(1, 2 * self.cells), np.uint32))
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

    @property
    def update_threads(self) -> int:
        """Threads of an optimizer step: one per parameter, or per cell with touch_group."""
        return self.cells or self.count

    def touched_half(self, step: int) -> int:
        """First word of the ``touched`` half that training step ``step`` marks."""
        return (step % 2) * self.cells

    def optimizer_vars(self) -> dict:
        return {"g_plain_params": self.params, "g_plain_grads": self.grads, "g_plain_touched": self.touched,
                "g_plain_m": self.adam_m, "g_plain_v": self.adam_v, "g_plain_vmax": self.adam_vmax}

    def optimizer_uniforms(self, step: int) -> dict:
        """Uniforms of adam_plain_step for training step ``step`` (0-based)."""
        return {"lo": self.lo, "hi": self.hi, "lazy": int(self.lazy), "touch_group": self.touch_group,
                "touched_read": self.touched_half(step), "touched_clear": self.touched_half(step + 1)}
