"""Benchmark: neural texture compression against BCn, and its training speed.

Quality: each sample material (6 textures) at 2, 4, 8 and 16 bpp through the real
``ntc`` stage; per texture the neural PSNR next to BCn at equal bytes (BC7/BC5/BC4 at
the resolution whose bytes equal the neural set's, upsampled bilinearly) and the set
mean next to full-resolution BCn (32 bpp).
Speed (--big N): an N^2 6-texture set made by scripts/make_assets.py; ms/step, and the
best and the final set PSNR with the training time to each, and to a preview within
1.5 dB of the final (PSNR checked every --check steps; the first 20 steps, which compile
the kernels, are trained but not timed).
Set figures are PSNRs of the mean MSE over the set's textures (bakery.formats.images.
set_psnr), never means of dB values: a constant map decodes to ~110 dB or inf and would
swing a dB mean by 10+ dB. (The stage's own manifest still reports ``mean_psnr_db``, a
mean of the finite dB values; this benchmark recomputes the set figure from MSE.)
Prints the device, the settings, tables, and writes bench/out/ntc.json.

    python3 bench/ntc.py [--device auto] [--steps 3000] [--big 2048]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.nn import parameters  # noqa: E402
from bakery.formats.images import psnr, set_psnr  # noqa: E402
from bakery.stages.ntc.objective import LatentTextureFit  # noqa: E402
from bakery.nn.optimizers import Adam  # noqa: E402
from bakery.nn.trainer import TrainConfig, Trainer  # noqa: E402
from bakery.materials import load_material, renormalize_normals  # noqa: E402
from bakery.stages.ntc.rate import candidates, choose  # noqa: E402
from bakery.pipeline.task import run_task  # noqa: E402
from bakery.stages import StageInput, get_stage  # noqa: E402


def material_files(folder: Path) -> dict:
    return {p.stem: p for p in sorted(folder.glob("*.png"))}


def _db(v) -> str:
    return f"{float(v):7.2f}" if v is not None else "     --"


def quality(a, dev) -> list[dict]:
    stage = get_stage("ntc")
    rows = []
    log = logging.getLogger("bench")
    for folder in sorted(Path(a.materials).iterdir()):
        for bpp in a.bpp:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                m = run_task(stage, [StageInput(folder.name, material_files(folder))],
                             {"bpp": bpp, "steps": a.steps, "batch": a.batch}, seed=0,
                             device_provider=lambda: dev, out_dir=Path(tmp) / "b", log=log)
                wall = time.perf_counter() - t0
            base = m["ntc"]["baseline"]
            same = {r: t.get("same_bytes_psnr") for r, t in base["textures"].items()}
            full = {r: t["psnr"] for r, t in base["textures"].items()}
            row = {"material": folder.name, "bpp_requested": bpp, "bpp": m["metrics"]["bpp"],
                   "psnr": m["metrics"]["psnr_db"], "mean_psnr": set_psnr(m["metrics"]["psnr_db"].values()),
                   "bcn_same_bytes": same,
                   "bcn_same_bytes_mean": set_psnr(same.values()) if all(v is not None for v in same.values()) else None,
                   "bcn_full": full, "bcn_full_mean": set_psnr(full.values()), "wall_s": round(wall, 2)}
            rows.append(row)
            print(f"{folder.name:13} {bpp:5.1f} bpp ({row['bpp']:.2f}): neural mean {row['mean_psnr']:.2f} dB | "
                  f"BCn same bytes {_db(row['bcn_same_bytes_mean'])} | BCn 32 bpp {_db(row['bcn_full_mean'])} | "
                  f"{wall:.1f} s", flush=True)
            for r in row["psnr"]:
                print(f"    {r:10} neural {_db(row['psnr'][r])}  bcn@same {_db(row['bcn_same_bytes'][r])}  "
                      f"bcn@full {_db(row['bcn_full'][r])}", flush=True)
    return rows


def speed(a, dev) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_assets.py"), "--out", tmp, "--size",
                        str(a.big)], check=True, capture_output=True)
        folder = sorted((Path(tmp) / "materials").iterdir())[0]
        mat = load_material(material_files(folder))
    h, w, c = mat.image.shape
    point = choose(candidates(w, h, c, hidden=64, layers=2, bits=4, pe_octaves=3), a.big_bpp)
    t0 = time.perf_counter()
    obj = LatentTextureFit(dev, mat.image, point.grid, normal_channel=mat.normal_channel)
    tr = Trainer(dev, point.network, obj, TrainConfig(steps=a.big_steps, batch=a.big_batch, optimizer=Adam(lr=5e-3),
                                                      schedule="cosine", steps_per_submit=50))
    tr.train(20)  # compiles the pipelines; these steps count in the schedule, not in the times
    curve = []
    train_s = 0.0
    while tr.step < a.big_steps:
        t1 = time.perf_counter()
        tr.train(a.check)
        train_s += time.perf_counter() - t1
        dec = renormalize_normals(obj.decode(tr), mat.normal_channel)
        curve.append({"step": tr.step, "train_s": round(train_s, 3),
                      "set_psnr": round(set_psnr([psnr(dec[..., s:s + n], mat.image[..., s:s + n])
                                                  for s, n in mat.slices]), 3)})
        print(f"  big set step {tr.step:6d}: {train_s:7.2f} s training, set PSNR (mean MSE) "
              f"{curve[-1]['set_psnr']:.2f} dB", flush=True)
    final = curve[-1]
    best = max(curve, key=lambda p: p["set_psnr"])
    preview = next(p for p in curve if p["set_psnr"] >= final["set_psnr"] - 1.5)
    ms = train_s / (a.big_steps - 20) * 1e3
    return {"size": a.big, "bpp": point.bpp, "steps": a.big_steps, "batch": a.big_batch, "ms_per_step": round(ms, 4),
            "final_set_psnr": final["set_psnr"], "time_to_final_s": final["train_s"],
            "best_set_psnr": best["set_psnr"], "best_step": best["step"], "time_to_best_s": best["train_s"],
            "preview_within_1p5db_s": preview["train_s"], "preview_step": preview["step"], "curve": curve,
            "loss_scale_end": tr.store.loss_scale(), "wall_s": round(time.perf_counter() - t0, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--materials", default=str(ROOT / "assets" / "materials"))
    p.add_argument("--bpp", type=float, nargs="*", default=[2, 4, 8, 16])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=1 << 16)
    p.add_argument("--big", type=int, default=0, help="also time an N^2 set (0: skip)")
    p.add_argument("--big-bpp", type=float, default=8.0)
    p.add_argument("--big-steps", type=int, default=20000)
    p.add_argument("--big-batch", type=int, default=1 << 18)
    p.add_argument("--check", type=int, default=1000)
    p.add_argument("--reduction", help="CoopVec gradient reduction: JSON, or bench/grad_reduction.py's output file")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "ntc.json"))
    a = p.parse_args()
    if a.reduction:
        print(f"gradient reduction: {parameters.use_reduction(a.reduction)}")
    dev = open_device(a.device)
    print(f"device: {dev.info.adapter} ({dev.info.backend}, cooperative vectors {dev.coopvec})", flush=True)
    print(f"settings: quality bpp {a.bpp} ({a.steps} steps, batch {a.batch}); speed set {a.big or 'skipped'}"
          + (f"^2 at {a.big_bpp} bpp, {a.big_steps} steps, batch {a.big_batch}, cosine lr 5e-3, PSNR every "
             f"{a.check} steps" if a.big else ""), flush=True)
    result = {"benchmark": "ntc", "device": dev.info.to_dict(), "steps": a.steps, "batch": a.batch,
              "reduction": parameters.COOPVEC_REDUCTION.__dict__ if dev.coopvec else None}
    if a.bpp:
        result["quality"] = quality(a, dev)
    if a.big:
        result["speed"] = speed(a, dev)
        s = result["speed"]
        print(f"{a.big}^2 set at {s['bpp']:.2f} bpp: {s['ms_per_step']:.3f} ms/step; set PSNR (mean MSE) final "
              f"{s['final_set_psnr']:.2f} dB after {s['time_to_final_s']:.1f} s, best {s['best_set_psnr']:.2f} dB "
              f"(step {s['best_step']}) after {s['time_to_best_s']:.1f} s, within 1.5 dB of final after "
              f"{s['preview_within_1p5db_s']:.1f} s")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
