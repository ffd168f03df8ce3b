#!/usr/bin/env python3
"""Benchmark: a studio's six-map texture set baked as it is, at 4096^2.

The set is generated (smooth fields and bricks, so every role has structure): albedo,
normal, roughness, metalness, AO and height, laid out as Unreal names and packs them
(``T_Rock_D``, DirectX ``T_Rock_N``, ``T_Rock_ORM``, a 16-bit ``T_Rock_Height``), baked
through ``material = "lib/*"`` alone by ``ntc``, ``mipmap`` and ``neural_material`` at
their production defaults. The baseline in the same run is the same maps named by plain
role (``albedo.png``, ``normal.png``, ...), one per file, what bakery read before it knew
studio naming: detection, channel splitting and the DirectX flip should cost nothing
measurable, and mipmap (deterministic on the GPU) should give the same bytes. Each
(set, stage) is one bake in a fresh process after an untimed warm-up bake (Slang compile
caches); printed and written per bake: wall time, the task's own seconds, peak GPU memory
above idle (nvidia-smi every 200 ms) and the stage's headline metrics.

    python3 bench/studio_library.py --device vulkan                 # H200: 4096^2
    python3 bench/studio_library.py --size 96 --small --device software   # CPU check
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image

import workloads as W

STAGES = ("ntc", "mipmap", "neural_material")
SMALL_PARAMS = {"ntc": {"bpp": 16.0, "steps": 20, "batch": 1024}, "mipmap": {"steps": 4, "pairs": 2, "eval_pairs": 2},
                "neural_material": {"steps": 4, "batch": 256, "eval_directions": 2, "finetune_steps": 0}}


def generate(size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """role -> float32 [size, size, C] in [0, 1] storage space (normals OpenGL)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    rows = np.floor(y * 16)
    mortar = ((np.abs((x * 8 + 0.5 * (rows % 2)) % 1 - 0.5) > 0.46) | (np.abs((y * 16) % 1 - 0.5) > 0.42))
    height = np.where(mortar, 0.15, 0.7 + 0.1 * np.sin(37 * x + 3 * rows) * np.cos(23 * y)).astype(np.float32)
    gy, gx = np.gradient(height * size / 64.0)
    n = np.stack([-gx, gy, np.ones_like(gx)], -1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    tint = rng.uniform(0.85, 1.15, 3).astype(np.float32)
    albedo = np.where(mortar[..., None], 0.55, np.stack([0.55, 0.25, 0.18], -1) * tint *
                      (0.85 + 0.15 * np.sin(91 * x * y)[..., None]))
    return {"albedo": np.clip(albedo, 0, 1).astype(np.float32), "normal": n * 0.5 + 0.5,
            "roughness": np.where(mortar, 0.9, 0.45 + 0.2 * np.cos(13 * x))[..., None].astype(np.float32),
            "metalness": ((x > 0.75) & (y > 0.75) & ~mortar)[..., None].astype(np.float32),
            "ao": np.where(mortar, 0.55, 1.0)[..., None].astype(np.float32),
            "height": height[..., None]}


def _u8(a: np.ndarray) -> np.ndarray:
    return (np.clip(a, 0, 1) * 255 + 0.5).astype(np.uint8)


def write(folder: Path, maps: dict[str, np.ndarray], layout: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    h16 = np.rint(maps["height"][..., 0] * 65535).astype(np.uint16)
    if layout == "plain":
        for role in ("albedo", "normal", "roughness", "metalness", "ao"):
            a = _u8(maps[role])
            Image.fromarray(a[..., 0] if a.shape[2] == 1 else a).save(folder / f"{role}.png")
        Image.fromarray(h16).save(folder / "height.png")
        return
    dx = _u8(maps["normal"])
    dx[..., 1] = 255 - dx[..., 1]
    Image.fromarray(_u8(maps["albedo"])).save(folder / "T_Rock_D.png")
    Image.fromarray(dx).save(folder / "T_Rock_N.png")
    Image.fromarray(_u8(np.concatenate([maps["ao"], maps["roughness"], maps["metalness"]], -1))).save(
        folder / "T_Rock_ORM.png")
    Image.fromarray(h16).save(folder / "T_Rock_Height.png")


def pipeline(folder: Path, stage: str, device: str, small: bool) -> Path:
    params = SMALL_PARAMS[stage] if small else {}
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in params.items())
    text = (f'[project]\nname = "studio"\ndevice = "{device}"\nseed = 1\n\n[assets.lib]\nmaterial = "lib/*"\n\n'
            f'[stages.{stage}]\ntype = "{stage}"\ninputs = ["lib"]\nparams = {{ {inline} }}\n')
    (folder / "pipeline.toml").write_text(text)
    return folder / "pipeline.toml"


def headline(report: dict) -> dict:
    task = (report.get("tasks") or [{}])[0]
    metrics = task.get("metrics") or {}
    keep = ("mean_psnr_db", "set_psnr_db", "bpp", "trained_rmse_1_4", "box_rmse_1_4", "toksvig_rmse_1_4",
            "psnr_db", "flip", "constant_psnr_db")
    return {k: metrics[k] for k in keep if k in metrics}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--device", default="auto", choices=["auto", "vulkan", "software"])
    ap.add_argument("--small", action="store_true", help="tiny step counts (CPU check)")
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--work", type=Path, default=Path("bench/out/studio_library"))
    ap.add_argument("--out", type=Path, default=Path("bench/out/studio_library.json"))
    args = ap.parse_args()

    shutil.rmtree(args.work, ignore_errors=True)
    maps = generate(args.size)
    sets = {}
    for layout in ("unreal", "plain"):
        folder = args.work / layout
        write(folder / "lib" / "rock", maps, layout)
        W.link_compile_cache(folder, args.work)
        sets[layout] = folder
    warm = args.work / "warm"
    write(warm / "lib" / "rock", generate(min(args.size, 256)), "unreal")
    W.link_compile_cache(warm, args.work)

    rows = []
    for stage in args.stages:
        W.run_bake(pipeline(warm, stage, args.device, True), args.work)        # compile caches, untimed
        outputs = {}
        for layout, folder in sets.items():
            shutil.rmtree(folder / "out", ignore_errors=True)
            shutil.rmtree(folder / ".bakery-cache", ignore_errors=True)
            with W.GpuSampler() as mem:
                run = W.run_bake(pipeline(folder, stage, args.device, args.small), args.work)
            outputs[layout] = {k: v for k, v in W.outputs(folder / "out").items() if not k.endswith("manifest.json")}
            task = (run["report"].get("tasks") or [{}])[0]
            row = {"stage": stage, "set": layout, "size": args.size, "exit": run["exit"],
                   "wall_s": round(run["wall_s"], 2), "task_s": round(task.get("seconds") or 0.0, 2),
                   "peak_gpu_mib": mem.peak_mib(), **headline(run["report"])}
            if run["exit"] != 0:
                row["log"] = run["log"][-1500:]
            rows.append(row)
        same = outputs["unreal"] == outputs["plain"]
        rows[-1]["same_bytes_as_studio_set"] = same
        rows[-2]["same_bytes_as_studio_set"] = same

    print(f"{'stage':16} {'set':7} {'size':>5} {'wall s':>8} {'task s':>8} {'peak GPU MiB':>12} {'same bytes':>10}  metrics")
    for r in rows:
        metrics = ", ".join(f"{k} {v}" for k, v in r.items() if k in ("mean_psnr_db", "bpp", "trained_rmse_1_4",
                                                                       "toksvig_rmse_1_4", "psnr_db", "flip")
                            and not isinstance(v, dict))
        print(f"{r['stage']:16} {r['set']:7} {r['size']:>5} {r['wall_s']:>8} {r['task_s']:>8} "
              f"{str(r['peak_gpu_mib']):>12} {str(r['same_bytes_as_studio_set']):>10}  {metrics}"
              + ("" if r["exit"] == 0 else f"  FAILED (exit {r['exit']})"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": W.machine(), "settings": {k: str(v) for k, v in vars(args).items()},
                                    "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
