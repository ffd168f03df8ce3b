"""Benchmark: bakery's neural-texture fit against the PyTorch peer, same GPU, same job.

Reference network: UV -> frequency encoding (3 octaves, 12 inputs) -> 3 x 64 ReLU -> 3,
MSE, Adam (lr 5e-3), 1024^2 procedural target, at each batch of --batches (default 2^16,
2^18, 2^20). Every side runs 20 warm-up steps then ``--steps`` timed steps (bakery with the
GPU kept busy by decodes for a second between them: bench/clocks.py); PSNR is over
the whole image after equal steps. The peer (PyTorch, torch_peer.py) runs in each of its
modes (fp32 eager, torch.compile, bf16 autocast) and bakery is compared against the
fastest of them at each batch. ``--seeds N`` runs every side N times (seeds 0..N-1; the
peer's torch.manual_seed replaced by each), since the final PSNR of one constant-rate Adam
fit moves by a dB or more between seeds: the table then gives the median ms/step and the
PSNR of the mean squared error over the seeds, with the lowest and highest run. Prints the
device, the settings and a table per batch; writes JSON (bench/out/train_texture.json).

    python3 bench/train_texture.py [--device vulkan] [--steps 1000] [--peer .device/torch_peer.py]
    python3 bench/train_texture.py --device software --small     (CPU smoke test, no peer)
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.nn import parameters  # noqa: E402
from bakery.formats.images import encode_png  # noqa: E402
from bakery.imaging import set_psnr, to_uint8  # noqa: E402
from bakery.nn.encodings import FrequencyEncoding  # noqa: E402
from bakery.nn.network import NetworkSpec  # noqa: E402
from bakery.nn.optimizers import Adam  # noqa: E402
from bakery.stages.neural_texture.objective import TextureFit  # noqa: E402
from bakery.nn.trainer import TrainConfig, Trainer  # noqa: E402
from bench.clocks import decode_on_gpu, keep_busy  # noqa: E402
from bench.workloads import save_json  # noqa: E402
from bench.experiments import reduction as experimental_reduction  # noqa: E402

WARMUP = 20


def procedural_target(size: int) -> np.ndarray:
    """The peer's own procedural pattern (torch_peer.py without --image)."""
    lin = np.linspace(0, 1, size)
    yy, xx = np.meshgrid(lin, lin, indexing="ij")
    return np.stack([0.5 + 0.5 * np.sin(12 * xx + 3 * np.sin(9 * yy)), 0.5 + 0.5 * np.cos(40 * yy * xx),
                     0.5 + 0.5 * np.sin(20 * (xx - yy))], -1).astype(np.float32)


def float_psnr(pred: np.ndarray, target: np.ndarray) -> float:
    """The peer's PSNR: clamp the prediction, MSE in float."""
    mse = float(np.mean((np.clip(pred, 0, 1) - target) ** 2))
    return 10 * math.log10(1 / max(mse, 1e-12))


PEER_MODES = {"eager": [], "compile": ["--compile"], "amp": ["--amp"]}


# Runs the peer with its torch.manual_seed(0) replaced by another seed, nothing else changed.
PEER_WITH_SEED = ("import runpy, sys, torch; seed = int(sys.argv[1]); manual_seed = torch.manual_seed; "
                  "torch.manual_seed = lambda _: manual_seed(seed); sys.argv = sys.argv[2:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')")


def run_bakery(a, target: np.ndarray, seed: int = 0) -> dict:
    t_start = time.perf_counter()
    dev = open_device(a.device, portable=a.portable)
    spec = NetworkSpec(FrequencyEncoding(2, a.octaves), (a.width,) * a.layers, 3)
    obj = TextureFit(dev, target)
    cfg = TrainConfig(steps=WARMUP + a.steps, batch=a.batch, optimizer=Adam(lr=a.lr), seed=seed,
                      steps_per_submit=a.steps_per_submit)
    tr = Trainer(dev, spec, obj, cfg)
    experimental_reduction.apply(tr)  # the lab's changes to a built trainer, where --reduction names any
    tr.train(WARMUP)
    # Timed in one segment, or in segments of --trace steps with the PSNR after each; the
    # GPU kept busy before each (the clock up again after the compile or the check:
    # bench/clocks.py).
    trace, train_s = [], 0.0
    while tr.step < cfg.steps:
        if dev.coopvec:
            keep_busy(decode_on_gpu(tr, obj))
        t0 = time.perf_counter()
        tr.train(a.trace or None)
        train_s += time.perf_counter() - t0
        if a.trace:
            trace.append([tr.step, round(float_psnr(obj.decode(tr), target), 3)])
    dt = train_s / a.steps
    pred = obj.decode(tr)
    t_dec = time.perf_counter()
    for _ in range(5):
        obj.decode(tr)
    decode_ms = (time.perf_counter() - t_dec) / 5 * 1e3
    chosen = experimental_reduction.chosen()  # with the lab's changes (forward_twice), where --reduction names one
    reduction = chosen.to_dict(tr.store.reduction) if chosen is not None else tr.store.reduction.__dict__
    extra = {"loss_scale_end": tr.store.loss_scale(), "reduction": reduction} if dev.coopvec else {}
    return {"impl": "bakery" + ("" if dev.coopvec else " (portable)"), "device": dev.info.to_dict(),
            "batch": a.batch, "steps": a.steps + WARMUP, "seed": seed, **extra,
            "ms_per_step": round(dt * 1e3, 4), "samples_per_s": round(a.batch / dt),
            "psnr_db": round(float_psnr(pred, target), 3), "decode_ms_full_image": round(decode_ms, 3),
            **({"psnr_trace": trace} if trace else {}),
            "wall_s": round(time.perf_counter() - t_start, 3)}


def run_peer(a, image_path: Path, mode: str, seed: int = 0) -> dict | None:
    peer = Path(a.peer)
    if not peer.is_file():
        print(f"peer not found at {peer}; skipping it", file=sys.stderr)
        return None
    cmd = [sys.executable, *(["-c", PEER_WITH_SEED, str(seed)] if seed else []), str(peer), "--image",
           str(image_path), "--batch", str(a.batch), "--steps", str(a.steps), "--width", str(a.width),
           "--layers", str(a.layers), "--octaves", str(a.octaves), "--lr", str(a.lr), *PEER_MODES[mode]]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"peer ({mode}) failed:", out.stderr[-2000:], file=sys.stderr)
        return None
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["impl"] = f"pytorch {mode}"
    row["seed"] = seed
    return row


def over_seeds(runs: list[dict]) -> dict:
    """One side's runs over the seeds: median time, PSNR of the mean squared error
    (set_psnr, never a mean of dB), the lowest and highest run's PSNR."""
    ms = float(np.median([r["ms_per_step"] for r in runs]))
    return {"impl": runs[0]["impl"], "seeds": len(runs), "ms_per_step": round(ms, 4),
            "samples_per_s": round(runs[0]["batch"] / (ms * 1e-3)),
            "psnr_db": round(set_psnr([r["psnr_db"] for r in runs]), 3), "psnr_db_min": min(r["psnr_db"] for r in runs),
            "psnr_db_max": max(r["psnr_db"] for r in runs), "wall_s": round(sum(r["wall_s"] for r in runs), 3),
            "runs": runs}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--portable", action="store_true", help="force the fp32 backend")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--batches", type=int, nargs="+", default=[1 << 16, 1 << 18, 1 << 20])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--octaves", type=int, default=3)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--steps-per-submit", type=int, default=50)
    p.add_argument("--peer", default=str(ROOT / ".device" / "torch_peer.py"))
    p.add_argument("--peer-modes", nargs="*", default=list(PEER_MODES), choices=list(PEER_MODES))
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--seeds", type=int, default=1, help="runs per side (seeds 0..N-1)")
    p.add_argument("--trace", type=int, default=0,
                   help="bakery only: PSNR every N steps, printed per seed (segments of N steps timed)")
    p.add_argument("--small", action="store_true", help="CPU smoke test: 128^2, batch 4096, 20 steps, no peer")
    p.add_argument("--reduction", help="CoopVec gradient reduction: JSON, or bench/grad_reduction.py's output file")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "train_texture.json"))
    a = p.parse_args()
    if a.seeds < 1 or a.trace < 0:
        p.error("--seeds must be at least 1 and --trace at least 0")
    if a.reduction:
        print(f"gradient reduction: {experimental_reduction.use_json(a.reduction)}")
    if a.small:
        a.size, a.batches, a.steps, a.no_peer = 128, [4096], 20, True

    out = Path(a.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    target = procedural_target(a.size)
    image_path = out.parent / "train_texture_target.png"
    image_path.write_bytes(encode_png(target))
    target = to_uint8(target).astype(np.float32) / 255.0  # every side fits the same 8-bit PNG

    dev = open_device(a.device, portable=a.portable)
    print(f"device: {dev.info.adapter} ({dev.info.backend}, cooperative vectors {dev.coopvec})")
    print(f"settings: {a.size}^2 procedural target (8-bit PNG), 12 -> {a.layers}x{a.width} relu -> 3, MSE, "
          f"Adam lr {a.lr}, {WARMUP} warm-up + {a.steps} timed steps, batches {a.batches}, "
          f"peer modes {[] if a.no_peer else a.peer_modes}", flush=True)
    tables = []
    if not dev.info.software:
        # The GPU starts at idle clocks: a throw-away run first, so the first batch measured
        # does not pay the ramp-up (it once read 0.50 ms/step at 2^16 instead of 0.16-0.22).
        warm = argparse.Namespace(**vars(a))
        warm.batch, warm.steps = a.batches[0], min(a.steps, 200)
        run_bakery(warm, target)
    seeds = range(a.seeds)
    for batch in a.batches:
        a.batch = batch
        rows = [over_seeds([run_bakery(a, target, s) for s in seeds])]
        for r in rows[0]["runs"]:
            if "psnr_trace" in r:
                print(f"seed {r['seed']} PSNR by step: " + " ".join(f"{n}:{v:.2f}" for n, v in r["psnr_trace"]))
        for m in [] if a.no_peer else a.peer_modes:
            runs = [r for s in seeds if (r := run_peer(a, image_path, m, s))]
            if runs:
                rows.append(over_seeds(runs))
        peers = rows[1:]
        table = {"batch": batch, "seeds": a.seeds, "rows": rows}
        print(f"\nbatch {batch}:\n{'impl':18} {'seeds':>5} {'ms/step':>9} {'Msamples/s':>11} {'PSNR dB':>8} "
              f"{'min-max dB':>12} {'wall s':>7}")
        for r in rows:
            print(f"{r['impl']:18} {r['seeds']:5} {r['ms_per_step']:9.3f} {r['samples_per_s'] / 1e6:11.1f} "
                  f"{r['psnr_db']:8.2f} {r['psnr_db_min']:6.2f}-{r['psnr_db_max']:5.2f} {r['wall_s']:7.1f}")
        if peers:
            fastest = max(peers, key=lambda r: r["samples_per_s"])
            table["fastest_peer"] = fastest["impl"]
            table["speedup_vs_fastest_peer"] = round(rows[0]["samples_per_s"] / fastest["samples_per_s"], 3)
            table["psnr_gap_vs_fastest_peer_db"] = round(rows[0]["psnr_db"] - fastest["psnr_db"], 3)
            table["psnr_gap_vs_best_peer_db"] = round(rows[0]["psnr_db"] - max(r["psnr_db"] for r in peers), 3)
            print(f"speed-up vs the fastest peer ({fastest['impl']}): {table['speedup_vs_fastest_peer']}x, "
                  f"PSNR gap {table['psnr_gap_vs_fastest_peer_db']:+.2f} dB "
                  f"({table['psnr_gap_vs_best_peer_db']:+.2f} dB vs the best peer PSNR)", flush=True)
        tables.append(table)
        save_json(out, {"benchmark": "train_texture", "device": dev.info.to_dict(), "size": a.size,
                        "steps": a.steps, "warmup": WARMUP, "lr": a.lr, "width": a.width, "layers": a.layers,
                        "octaves": a.octaves, "tables": tables})   # after every batch: a cut run keeps them
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
