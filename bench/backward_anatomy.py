"""Benchmark: where the CoopVec backward pass spends its time, one operation at a time.

The texture fit's training kernel takes ~320 µs per 2^18 samples on the H200 while its
forward alone takes ~47 µs (bench/RESULTS.md). This times, per 2^18 threads, synthetic
kernels that each repeat one ingredient of the backward pass over three 64 x 64 fp16
layers, so the cost can be pinned on one of them:

  baseline      building a 64-vector per thread element by element and keeping one
                element live (every other kernel does this too)
  forward       h = relu(W h + b), three layers (coopVecMatMulAdd, TrainingOptimal)
  transposed    d = W^T d, three layers (coopVecMatMul with its transpose flag)
  copy          d = (W^T) d from a stored transposed copy, no transpose flag
  relu_grad     d = d * (h > 0), three layers, as whole-vector CoopVec operations
  element_io    float[64] -> CoopVec element by element and back, three times
                (what bk_from_vec / bk_to_vec do at the network's ends)
  chain         forward keeping h1..h3, then relu_grad and transposed per layer: the
                backward pass as the training kernel runs it, without stores or sums
  chain_copy    the same with the transposed copies
  tile_trip     per layer: each lane's vector into a groupshared row, the warp's rows
                times W as 16 x 16 cooperative-matrix tiles (W row-major in a buffer, fp32
                accumulators), back into the rows, each lane's vector read back: the
                tile backward pass's core (CoopVecReduction backward "mma")
  tile_only     the same three tile products with the vectors written once and read once:
                what a pass that keeps its rows in groupshared memory would pay

Prints the device, the settings and a table (µs per dispatch, Vulkan timestamps, mean of
--repeats); writes JSON (bench/out/backward_anatomy.json). On a device without
cooperative vectors it only compiles the kernels (a check that they type-check).

    python3 bench/backward_anatomy.py [--device vulkan] [--threads 262144] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.nn.encodings import IdentityEncoding  # noqa: E402
from bakery.nn.network import NetworkSpec  # noqa: E402
from bakery.nn.parameters import CoopVecReduction, ParameterStore, make_buffer  # noqa: E402

WIDTH = 64
VARIANTS = ("baseline", "forward", "transposed", "copy", "relu_grad", "element_io", "chain", "chain_copy",
            "tile_trip", "tile_only")

# Per thread: a 64-vector from its index, LAYERS of the variant's operation, one element
# kept (the sum of all would cost as much as what is measured).
KERNEL = r"""
RWByteAddressBuffer g_weights16;   // ParameterStore's fp16 weights: TrainingOptimal, then transposed copies
RWStructuredBuffer<float> g_sink;
static const int N = BK_ANATOMY_WIDTH;
typealias V = CoopVec<half, N>;

V seed_vector(uint t)
{
    V v;
    for (int i = 0; i < N; i++)
        v[i] = half(float((t * 2654435761u + uint(i) * 40503u) >> 20) / 4096.0 - 0.5);
    return v;
}

V layer_forward<let WO : int, let BO : int>(V h)
{
    let z = coopVecMatMulAdd<half, N>(h, CoopVecComponentType::Float16, g_weights16, WO, CoopVecComponentType::Float16,
                                      g_weights16, BO, CoopVecComponentType::Float16,
                                      CoopVecMatrixLayout::TrainingOptimal, false, 0);
    return max(z, V(half(0.0)));
}

V layer_transposed<let WO : int, let T : int>(V d)
{
    return coopVecMatMul<half, N>(d, CoopVecComponentType::Float16, g_weights16, WO, CoopVecComponentType::Float16,
                                  CoopVecMatrixLayout::TrainingOptimal, T != 0, 0);
}

V relu_grad(V h, V d)
{
    return d * (V(half(1.0)) - step(h, V(half(0.0))));
}

V element_io(V v)
{
    float[N] f = {};
    for (int i = 0; i < N; i++)
        f[i] = float(v[i]) * 0.5;
    V w;
    for (int i = 0; i < N; i++)
        w[i] = half(f[i]);
    return w;
}

#if BK_ANATOMY >= 8
typealias TA = linalg.CoopMat<half, MemoryScope.Subgroup, 16, 16, linalg.CoopMatMatrixUse.MatrixA>;
typealias TB = linalg.CoopMat<half, MemoryScope.Subgroup, 16, 16, linalg.CoopMatMatrixUse.MatrixB>;
typealias TC = linalg.CoopMat<float, MemoryScope.Subgroup, 16, 16, linalg.CoopMatMatrixUse.MatrixAccumulator>;
typealias TH = linalg.CoopMat<half, MemoryScope.Subgroup, 16, 16, linalg.CoopMatMatrixUse.MatrixAccumulator>;
RWByteAddressBuffer g_wrow;   // layer k's W row-major at halfs k * N * N
static const int ROW = N + 8;
groupshared half g_rows[BK_GROUP * ROW];

// The calling warp's rows times W_k, in place. Every lane calls it.
void tile_layer(uint thread, int k)
{
    static const int T = N / 16;
    uint first = thread - WaveGetLaneIndex();
    GroupMemoryBarrierWithWaveSync();
    for (uint r = first; r < first + WaveGetLaneCount(); r += 16)
    {
        TC acc[T];
        [ForceUnroll]
        for (int t = 0; t < T; t++)
            acc[t] = TC(0.0);
        [ForceUnroll]
        for (int kk = 0; kk < T; kk++)
        {
            let a = TA.Load<linalg.CoopMatMatrixLayout.RowMajor>(g_rows, r * ROW + 16 * kk, ROW);
            [ForceUnroll]
            for (int t = 0; t < T; t++)
                acc[t] = linalg.coopMatMulAdd<float, false>(
                    a, TB.Load<linalg.CoopMatMatrixLayout.RowMajor>(g_wrow, k * N * N + 16 * kk * N + 16 * t, N), acc[t]);
        }
        GroupMemoryBarrierWithWaveSync();
        [ForceUnroll]
        for (int t = 0; t < T; t++)
        {
            TH h;
            h.copyFrom(acc[t]);
            h.Store<linalg.CoopMatMatrixLayout.RowMajor>(g_rows, r * ROW + 16 * t, ROW);
        }
    }
    GroupMemoryBarrierWithWaveSync();
}
#endif

[shader("compute")]
[numthreads(BK_GROUP, 1, 1)]
void anatomy(uint3 tid: SV_DispatchThreadID, uint3 gtid: SV_GroupThreadID)
{
    V v = seed_vector(tid.x);
#if BK_ANATOMY == 1
    v = layer_forward<W0, B0>(v); v = layer_forward<W1, B1>(v); v = layer_forward<W2, B2>(v);
#elif BK_ANATOMY == 2
    v = layer_transposed<W2, 1>(v); v = layer_transposed<W1, 1>(v); v = layer_transposed<W0, 1>(v);
#elif BK_ANATOMY == 3
    v = layer_transposed<T2, 0>(v); v = layer_transposed<T1, 0>(v); v = layer_transposed<T0, 0>(v);
#elif BK_ANATOMY == 4
    let h = seed_vector(tid.x ^ 0x5bd1e995u);
    v = relu_grad(h, v); v = relu_grad(v, h); v = relu_grad(h, v);
#elif BK_ANATOMY == 5
    v = element_io(v); v = element_io(v); v = element_io(v);
#elif BK_ANATOMY == 6 || BK_ANATOMY == 7
    let h1 = layer_forward<W0, B0>(v);
    let h2 = layer_forward<W1, B1>(h1);
    let h3 = layer_forward<W2, B2>(h2);
    V d = relu_grad(h3, seed_vector(tid.x ^ 0x27d4eb2fu));
#if BK_ANATOMY == 6
    d = relu_grad(h2, layer_transposed<W2, 1>(d));
    d = relu_grad(h1, layer_transposed<W1, 1>(d));
    v = layer_transposed<W0, 1>(d);
#else
    d = relu_grad(h2, layer_transposed<T2, 0>(d));
    d = relu_grad(h1, layer_transposed<T1, 0>(d));
    v = layer_transposed<T0, 0>(d);
#endif
#elif BK_ANATOMY == 8
    [ForceUnroll]
    for (int k = 2; k >= 0; k--)
    {
        v.store(g_rows, int(gtid.x * ROW * 2));
        tile_layer(gtid.x, k);
        v = coopVecLoadGroupshared<N>(g_rows, int(gtid.x * ROW * 2));
    }
#elif BK_ANATOMY == 9
    v.store(g_rows, int(gtid.x * ROW * 2));
    tile_layer(gtid.x, 2); tile_layer(gtid.x, 1); tile_layer(gtid.x, 0);
    v = coopVecLoadGroupshared<N>(g_rows, int(gtid.x * ROW * 2));
#endif
    g_sink[tid.x] = float(v[int(tid.x % uint(N))]);
}
"""


def kernel_source(store: ParameterStore | None, variant: str) -> str:
    """The anatomy kernel for one variant, with the store's weight offsets (0 without one:
    compiling only)."""
    offsets = {}
    for k in range(3):
        args = [int(v) for v in store.linear_args[k].split(", ")] if store is not None else [0] * 10
        offsets.update({f"W{k}": args[0], f"B{k}": args[1], f"T{k}": args[8]})
    return ("#define BK_GROUP 256\n" + "".join(f"#define {k} {v}\n" for k, v in offsets.items())
            + f"#define BK_ANATOMY_WIDTH {WIDTH}\n#define BK_ANATOMY {VARIANTS.index(variant)}\n" + KERNEL)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1 << 18)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "backward_anatomy.json"))
    a = p.parse_args()
    dev = open_device(a.device)
    print(f"device: {dev.info.adapter} ({dev.info.backend}, cooperative vectors {dev.coopvec})")
    print(f"settings: {a.threads} threads, 3 layers of {WIDTH} x {WIDTH} fp16, 256-thread workgroups, "
          f"mean of {a.repeats} dispatches")
    if not dev.coopvec:
        for v in VARIANTS:  # type-check only: the portable device cannot run CoopVec
            module = dev.spy.load_module_from_source(f"anatomy_check_{v}", kernel_source(None, v))
            dev.spy.link_program([module], [module.entry_point("anatomy")])
        print(f"compiled {len(VARIANTS)} kernels; timing them needs cooperative vectors")
        return 0

    import slangpy as spy

    spec = NetworkSpec(IdentityEncoding(WIDTH), (WIDTH, WIDTH), WIDTH)
    store = ParameterStore(dev, spec, reduction=CoopVecReduction(group=256, transposed_copy=True))
    params = spec.init_params(0)
    store.upload(params)
    sink = make_buffer(dev, np.zeros(a.threads, np.float32))
    wrow = make_buffer(dev, np.concatenate([w.astype(np.float16).reshape(-1) for w, _ in spec.split(params)]))
    pool = dev.spy.create_query_pool(type=spy.QueryType.timestamp, count=2 * a.repeats)
    rows = []
    for v in VARIANTS:
        kernel = dev.kernel(kernel_source(store, v), "anatomy")
        bindings = {"g_weights16": store.weights16, "g_sink": sink}
        if v.startswith("tile"):
            bindings["g_wrow"] = wrow
        dev.submit(lambda enc: kernel.dispatch([a.threads, 1, 1], vars=bindings, command_encoder=enc))  # warm-up

        def record(enc):
            for r in range(a.repeats):
                enc.write_timestamp(pool, 2 * r)
                kernel.dispatch([a.threads, 1, 1], vars=bindings, command_encoder=enc)
                enc.write_timestamp(pool, 2 * r + 1)

        dev.submit(record)
        dev.wait()
        t = np.array(pool.get_timestamp_results(0, 2 * a.repeats), np.float64).reshape(-1, 2)
        us = float((t[:, 1] - t[:, 0]).mean() * 1e6)
        rows.append({"variant": v, "us_per_dispatch": round(us, 1)})
    base = rows[0]["us_per_dispatch"]
    print(f"\n{'variant':<12} {'µs':>8} {'µs over baseline':>17}")
    for r in rows:
        print(f"{r['variant']:<12} {r['us_per_dispatch']:>8.1f} {r['us_per_dispatch'] - base:>17.1f}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "backward_anatomy", "device": dev.info.to_dict(),
                               "threads": a.threads, "width": WIDTH, "repeats": a.repeats, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
