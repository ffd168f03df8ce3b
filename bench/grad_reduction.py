"""Benchmark: designs of the CoopVec weight-gradient reduction, for correctness and speed.

Each variant (bench/experiments/reduction.py's Variant: a CoopVecReduction, its workgroup
size, persistent workgroup count, per-workgroup fp32 slices or split-K with its row
layout, and the lab's changes around it) trains the reference job of
bench/train_texture.py (12 -> 3 x 64 ReLU -> 3, batch 2^18 by default) and reports
  - the relative error of its gradient against the float64 reference, per layer,
    on one batch (the first step's samples);
  - ms/step over --steps steps after a warm-up (wall clock, one wait at the end);
  - PSNR of the whole image after warm-up + timed steps.
Prints the device, the settings and a table; writes JSON (bench/out/grad_reduction.json).
On a device without cooperative vectors only the portable backend runs (a smoke test).

    python3 bench/grad_reduction.py [--device vulkan] [--batch 262144] [--steps 300]
    python3 bench/grad_reduction.py --device software --small
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.nn import parameters  # noqa: E402
from bakery.nn.encodings import FrequencyEncoding  # noqa: E402
from bakery.nn.network import NetworkSpec  # noqa: E402
from bakery.nn.optimizers import Adam  # noqa: E402
from bakery.nn.trainer import TrainConfig, Trainer  # noqa: E402
from bakery.stages.neural_texture.objective import TextureFit  # noqa: E402
from bench.clocks import decode_on_gpu, keep_busy  # noqa: E402
from bench.experiments import reduction as experimental_reduction  # noqa: E402
from bench.step_profile import profile_steps  # noqa: E402
from bench.train_texture import float_psnr, procedural_target  # noqa: E402
from tests.reference import batch_texels, mse_gradients, texel_uv  # noqa: E402

R = parameters.CoopVecReduction
V = experimental_reduction.Variant
# The 128-thread split-K default with the generated backward pass, rows one per sample;
# and with rows in blocks of 32 samples copied out per warp (the default before column groups;
# bench/RESULTS.md, grad_reduction).
GENERATED = R(group=128, mode="splitk", reduce_groups=132, unroll=2, generated_backward=True)
BLOCKS = replace(GENERATED, row_block=32, row_copy=True)
# and with each block's slots column group by column group (the default since)
COLUMNS = replace(BLOCKS, row_tiles=True)
# The designs measured and dropped (fp32 atomics, element and packed staging, per-thread
# split-K sums, more output tiles per warp, the sum spread over 32-lane warps, transposed weight
# copies, the backward pass on cooperative matrices) are in bench/HISTORY.md; the product no longer
# builds them.
VARIANTS = {
    "slices-256x264 (no cooperative matrices)": V(R()),
    "slices-256x132": V(R(max_groups=132)),
    "splitk mma, 132, unroll 2": V(R(mode="splitk", reduce_groups=132, unroll=2)),
    "splitk mma 128-thread, 132, unroll 2": V(R(group=128, mode="splitk", reduce_groups=132, unroll=2)),
    "splitk mma 128-thread, 264, unroll 2": V(R(group=128, mode="splitk", unroll=2)),
    "splitk mma 128-thread, 132, unroll 2, one tile per workgroup": V(R(group=128, max_groups=1 << 16,
                                                                        mode="splitk", reduce_groups=132, unroll=2)),
    "splitk mma 128-thread, 132, unroll 2, generated backward": V(GENERATED),
    "rows in blocks of 32, generated backward": V(replace(GENERATED, row_block=32)),
    "rows in blocks of 128, generated backward": V(replace(GENERATED, row_block=128)),
    "rows in blocks of 32, warp copies, generated backward": V(BLOCKS),
    "rows in blocks of 128, warp copies, generated backward": V(replace(BLOCKS, row_block=128)),
    "rows in blocks of 32, warp copies, 264 groups": V(replace(BLOCKS, reduce_groups=264)),
    "rows in blocks of 32, warp copies, unroll 4": V(replace(BLOCKS, unroll=4)),
    "two forwards, blocks of 32, warp copies": V(BLOCKS, forward_twice=True),
    "column groups: blocks of 32, warp copies, slots column group by column group": V(COLUMNS),
    "column groups: blocks of 128, warp copies, slots column group by column group": V(
        replace(BLOCKS, row_block=128, row_tiles=True)),
    "column groups: blocks of 32, 264 sum groups": V(replace(COLUMNS, reduce_groups=264)),
    "column groups: 66 sum groups": V(replace(COLUMNS, reduce_groups=66)),
    "occupancy: default, 528 training workgroups": V(replace(COLUMNS, max_groups=528)),
    "occupancy: default, one tile per training workgroup": V(replace(COLUMNS, max_groups=1 << 16)),
    "diag: column groups, no sum (wrong)": V(COLUMNS, skip_sum=True),
    "diag: rows in blocks of 32, warp copies, no sum (wrong)": V(BLOCKS, skip_sum=True),
    "diag: 128-thread stores, no sum (wrong)": V(R(group=128, mode="splitk", unroll=2), skip_sum=True),
}
WARMUP = 20
PROFILED_STEPS = 20


def layer_errors(spec, got, ref) -> list[float]:
    out = []
    for l in spec.layers:
        sl = slice(l.weight_offset, l.bias_offset + l.n_out)
        out.append(float(np.linalg.norm(got[sl] - ref[sl]) / np.linalg.norm(ref[sl])))
    return out


def run_variant(a, dev, spec, target, params, ref, name, variant) -> dict:
    experimental_reduction.use(variant)
    t_start = time.perf_counter()
    cfg = TrainConfig(steps=WARMUP + a.steps, batch=a.batch, optimizer=Adam(lr=a.lr), seed=0,
                      steps_per_submit=a.steps_per_submit)
    obj = TextureFit(dev, target)
    tr = Trainer(dev, spec, obj, cfg, params=params)
    experimental_reduction.apply(tr)
    errs = layer_errors(spec, tr.accumulate_gradients(), ref)
    tr = Trainer(dev, spec, obj, cfg, params=params)  # fresh gradient buffers
    experimental_reduction.apply(tr)
    compile_s = time.perf_counter() - t_start
    tr.train(WARMUP)
    if dev.coopvec:
        keep_busy(decode_on_gpu(tr, obj))  # the clock up again after the compile (bench/clocks.py)
    t0 = time.perf_counter()
    tr.train()
    dt = (time.perf_counter() - t0) / a.steps
    psnr = float_psnr(obj.decode(tr), target)
    loss_scale = tr.store.loss_scale()
    phases = profile_steps(dev, tr, PROFILED_STEPS)  # a few more steps, after the PSNR
    return {"variant": name, "reduction": None if variant is None else variant.to_dict(),
            "ms_per_step": round(dt * 1e3, 4), "samples_per_s": round(a.batch / dt),
            "grad_rel_err_per_layer": [float(f"{e:.3g}") for e in errs], "psnr_db": round(psnr, 3),
            "loss_scale_end": loss_scale, "setup_s": round(compile_s, 2), "gpu_us_per_phase": phases}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--batch", type=int, default=1 << 18)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--steps-per-submit", type=int, default=50)
    p.add_argument("--only", default="", help="variant names (prefixes), separated by ';'")
    p.add_argument("--small", action="store_true", help="tiny CPU-sized job (batch 4096, 128^2, 20 steps)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "grad_reduction.json"))
    a = p.parse_args()
    if a.small:
        a.batch, a.size, a.steps = 4096, 128, 20

    dev = open_device(a.device)
    spec = NetworkSpec(FrequencyEncoding(2, 3), (64,) * 3, 3)
    target = procedural_target(a.size)
    params = spec.init_params(0)
    t = batch_texels(0, 0, a.batch, a.size, a.size)
    ref, _ = mse_gradients(spec, params, texel_uv(t, a.size, a.size), target.reshape(-1, 3)[t])
    print(f"device: {dev.info.adapter} ({dev.info.backend}, cooperative vectors {dev.coopvec})")
    print(f"settings: 12 -> 3x64 relu -> 3, batch {a.batch}, {a.size}^2 target, Adam lr {a.lr}, "
          f"{WARMUP} warm-up + {a.steps} timed steps, {a.steps_per_submit} steps per submit", flush=True)
    variants = VARIANTS if dev.coopvec else {"portable": None}
    if a.only:
        keys = a.only.split(";")
        variants = {k: v for k, v in variants.items() if any(k.startswith(x) for x in keys)}
    rows = []
    out = Path(a.out).resolve()

    def save(best=None) -> None:
        """After every variant (a run cut at its time limit keeps the finished ones), and at the end."""
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(json.dumps({"benchmark": "grad_reduction", "device": dev.info.to_dict(), "batch": a.batch,
                                   "steps": a.steps, "rows": rows, "best": best}, indent=2))
        os.replace(tmp, out)

    for name, red in variants.items():
        try:
            rows.append(run_variant(a, dev, spec, target, params, ref, name, red))
        except Exception as e:  # noqa: BLE001 - report the variant and go on with the others
            rows.append({"variant": name, "error": str(e)[:500]})
        save()
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'variant':44} {'ms/step':>8} {'Msamp/s':>8} {'PSNR':>6}  {'GPU us: train/reduce/optim':27} "
          "grad rel. err per layer")
    for r in rows:
        if "error" in r:
            print(f"{r['variant']:44} failed: {r['error'][:80]}")
            continue
        errs = " ".join(f"{e:.1e}" for e in r["grad_rel_err_per_layer"])
        ph = r["gpu_us_per_phase"]
        gpu = "/".join(str(ph.get(k, "-")) for k in ("train_step", "reduce", "optimizer"))
        print(f"{r['variant']:44} {r['ms_per_step']:8.3f} {r['samples_per_s'] / 1e6:8.1f} {r['psnr_db']:6.2f}  "
              f"{gpu:27} {errs}")
    experimental_reduction.use(None)
    good = [r for r in rows if "error" not in r and r["reduction"] and not r["reduction"]["skip_sum"]
            and max(r["grad_rel_err_per_layer"]) < 1e-2]
    best = min(good, key=lambda r: r["ms_per_step"]) if good else None
    if best:
        print(f"fastest correct: {best['variant']} ({best['ms_per_step']:.3f} ms/step)")
    save(best and best["reduction"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
