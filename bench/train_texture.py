"""Benchmark: bakery's neural-texture fit against the PyTorch peer, same GPU, same job.

Reference network: UV -> frequency encoding (3 octaves, 12 inputs) -> 3 x 64 ReLU -> 3,
MSE, Adam (lr 5e-3), 1024^2 procedural target, batch 2^18. Both sides run 20 warm-up
steps then ``--steps`` timed steps; PSNR is over the whole image after equal steps.
Prints a table and writes JSON (bench/out/train_texture.json).

    python3 bench/train_texture.py [--device vulkan] [--steps 1000] [--peer .device/torch_peer.py]
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
from bakery.formats.images import encode_png, to_uint8  # noqa: E402
from bakery.nn.encodings import FrequencyEncoding  # noqa: E402
from bakery.nn.network import NetworkSpec  # noqa: E402
from bakery.nn.optimizers import Adam  # noqa: E402
from bakery.stages.neural_texture.objective import TextureFit  # noqa: E402
from bakery.nn.trainer import TrainConfig, Trainer  # noqa: E402

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


def run_bakery(a, target: np.ndarray) -> dict:
    t_start = time.perf_counter()
    dev = open_device(a.device, portable=a.portable)
    spec = NetworkSpec(FrequencyEncoding(2, a.octaves), (a.width,) * a.layers, 3)
    obj = TextureFit(dev, target)
    cfg = TrainConfig(steps=WARMUP + a.steps, batch=a.batch, optimizer=Adam(lr=a.lr), seed=0,
                      steps_per_submit=a.steps_per_submit)
    tr = Trainer(dev, spec, obj, cfg)
    tr.train(WARMUP)
    t0 = time.perf_counter()
    tr.train()
    dt = (time.perf_counter() - t0) / a.steps
    pred = obj.decode(tr)
    t_dec = time.perf_counter()
    for _ in range(5):
        obj.decode(tr)
    decode_ms = (time.perf_counter() - t_dec) / 5 * 1e3
    return {"impl": "bakery", "device": dev.info.to_dict(), "batch": a.batch, "steps": a.steps + WARMUP,
            "ms_per_step": round(dt * 1e3, 4), "samples_per_s": round(a.batch / dt),
            "psnr_db": round(float_psnr(pred, target), 3), "decode_ms_full_image": round(decode_ms, 3),
            "wall_s": round(time.perf_counter() - t_start, 3)}


def run_peer(a, image_path: Path) -> dict | None:
    peer = Path(a.peer)
    if not peer.is_file():
        print(f"peer not found at {peer}; skipping it", file=sys.stderr)
        return None
    cmd = [sys.executable, str(peer), "--image", str(image_path), "--batch", str(a.batch), "--steps",
           str(a.steps), "--width", str(a.width), "--layers", str(a.layers), "--octaves", str(a.octaves),
           "--lr", str(a.lr)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["impl"] = "pytorch"
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--portable", action="store_true", help="force the fp32 backend")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1 << 18)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--octaves", type=int, default=3)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--steps-per-submit", type=int, default=50)
    p.add_argument("--peer", default=str(ROOT / ".device" / "torch_peer.py"))
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "train_texture.json"))
    a = p.parse_args()

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    target = procedural_target(a.size)
    image_path = out.parent / "train_texture_target.png"
    image_path.write_bytes(encode_png(target))
    target = to_uint8(target).astype(np.float32) / 255.0  # both sides fit the same 8-bit PNG

    rows = [run_bakery(a, target)]
    if not a.no_peer:
        peer = run_peer(a, image_path)
        if peer:
            rows.append(peer)
    print(f"{'impl':8} {'ms/step':>9} {'Msamples/s':>11} {'PSNR dB':>8} {'wall s':>7}")
    for r in rows:
        print(f"{r['impl']:8} {r['ms_per_step']:9.3f} {r['samples_per_s'] / 1e6:11.1f} {r['psnr_db']:8.2f} {r['wall_s']:7.1f}")
    result = {"benchmark": "train_texture", "rows": rows}
    if len(rows) == 2:
        result["speedup_vs_peer"] = round(rows[0]["samples_per_s"] / rows[1]["samples_per_s"], 3)
        result["psnr_gap_db"] = round(rows[0]["psnr_db"] - rows[1]["psnr_db"], 3)
        print(f"speed-up vs PyTorch: {result['speedup_vs_peer']}x, PSNR gap {result['psnr_gap_db']:+.2f} dB")
    out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
