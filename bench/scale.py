#!/usr/bin/env python3
"""Benchmark: the Ray runner on 1, 2, 4 and 8 GPUs of one host (issue 18).

A pipeline of at least 200 tasks (pipeline.toml's stages over textures and materials cut
from assets/ at several sizes) is baked from a cold bundle cache with the Ray runner on a
local cluster this script starts with k GPUs (``CUDA_VISIBLE_DEVICES`` = the first k), for
each k asked for and present. The Slang compile cache is warmed once first (untimed), so
the rows compare baking, not compiling. Prints wall time, tasks/s, each GPU's busy share
(nvidia-smi, every 200 ms) and the scaling efficiency (speed-up over 1 GPU / k), checks
that the outputs equal the 1-GPU bake's (byte-identical files, else the lowest PSNR of a
differing image) and that ``bakery verify`` passes; writes bench/out/scale.json.

    python3 bench/scale.py --gpus 1,2,4,8                              # a multi-GPU host
    python3 bench/scale.py --small --logical --device software --gpus 1,2   # CPU dry run

``--logical`` declares k GPUs to Ray on a host without them (each actor then opens the
software device): it checks the script, not the scaling.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

import workloads as W


def image_psnr(a: bytes, b: bytes) -> float:
    from PIL import Image

    x = np.asarray(Image.open(io.BytesIO(a)), dtype=np.float64) / 255.0
    y = np.asarray(Image.open(io.BytesIO(b)), dtype=np.float64) / 255.0
    if x.shape != y.shape:
        return 0.0
    mse = float(np.mean((x - y) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def compare(reference: dict[str, bytes], out: dict[str, bytes]) -> dict:
    differing = [k for k, v in reference.items() if out.get(k) != v]
    psnrs = [image_psnr(reference[k], out[k]) for k in differing if k.endswith(".png") and k in out]
    return {"identical_files": f"{len(reference) - len(differing)}/{len(reference)}",
            "differing_other": sum(1 for k in differing if not k.endswith(".png")),
            "min_psnr_db_of_differing_png": round(min(psnrs), 2) if psnrs else None}


def bake_on(k: int, pipeline: Path, work: Path, args, only: list[str] | None = None) -> dict:
    """One bake on a fresh local Ray cluster of ``k`` GPUs; returns its numbers."""
    import ray

    from bakery.pipeline.config import load_pipeline
    from bakery.pipeline.executor import BakeOptions, bake

    env = W.bake_env(work)
    for key in ("XDG_CACHE_HOME", "PYTHONPATH", "RAY_AUTH_MODE"):
        os.environ[key] = env[key]  # the raylet and its workers inherit these
    if not args.logical:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(k))
    cpus = max(os.cpu_count() or 1, k + 1)
    t0 = time.perf_counter()
    ray.init(num_gpus=k, num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    started = time.perf_counter() - t0
    try:
        pipe = load_pipeline(pipeline)
        if only is None:
            for sub in ("entries", "records"):  # a cold bundle cache; compiled Slang stays
                shutil.rmtree(pipe.cache / sub, ignore_errors=True)
        opts = BakeOptions(runner="ray", assets=only or (), max_retries=args.max_retries, bars=False)
        with W.GpuSampler() as gpu:
            t1 = time.perf_counter()
            report = bake(pipe, opts, logging.getLogger("bench.scale"))
            wall = time.perf_counter() - t1
    finally:
        ray.shutdown()
    totals = report.totals()
    busy = gpu.busy()
    return {"gpus": k, "wall_s": round(wall, 2), "ray_start_s": round(started, 2), "tasks": totals.get("total"),
            "built": totals.get("built"), "failed": totals.get("failed", 0),
            "tasks_per_s": round((totals.get("built") or 0) / wall, 3),
            "gpu_busy": {i: v for i, v in (busy or {}).items() if i < k} or None,
            "task_s_per_wall_s": round(sum(t.seconds or 0 for t in report.tasks) / wall, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1,2,4,8", help="comma-separated GPU counts")
    ap.add_argument("--tasks", type=int, default=200, help="tasks in the pipeline (half textures, half materials)")
    ap.add_argument("--small", action="store_true", help="tiny params and 32-64 px images (CPU dry run)")
    ap.add_argument("--logical", action="store_true", help="declare the GPUs to Ray without having them (dry run)")
    ap.add_argument("--device", default="auto", choices=["auto", "vulkan", "software"])
    ap.add_argument("--max-retries", type=int, default=2)
    ap.add_argument("--work", type=Path, default=W.REPO / "bench" / "out" / "scale-work")
    ap.add_argument("--out", type=Path, default=W.REPO / "bench" / "out" / "scale.json")
    args = ap.parse_args()
    args.work, args.out = args.work.resolve(), args.out.resolve()   # Ray's workers run elsewhere
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the local cluster listens on loopback
    try:
        import ray  # noqa: F401
    except ImportError:
        print("bench/scale.py needs Ray: pip install 'bakery[ray]'", file=sys.stderr)
        return 2
    host = W.machine()
    wanted = [int(g) for g in args.gpus.split(",") if g]
    present = len(host["gpus"])
    counts = wanted if args.logical else [k for k in wanted if k <= present]
    skipped = sorted(set(wanted) - set(counts))
    if not counts:
        print(f"no GPU count of {wanted} fits this host ({present} GPUs); --logical for a dry run", file=sys.stderr)
        return 2
    if 1 not in counts:
        counts = [1] + counts  # the baseline

    folder = args.work / "pipeline"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    sizes = [32, 48, 64] if args.small else [128, 256, 512]
    W.resample_assets(folder, textures=args.tasks // 2, materials=args.tasks - args.tasks // 2, sizes=sizes, seed=18)
    W.link_compile_cache(folder, args.work)
    pipeline = W.write_pipeline(folder, small=args.small, device=args.device)

    # one texture and one material of each size, so no row pays for a compile
    firsts = [f"textures/t{i:03d}" for i in range(len(sizes))] + [f"materials/m{i:03d}" for i in range(len(sizes))]
    warm = bake_on(1, pipeline, args.work, args, only=firsts)
    print(f"warm-up (compiles, untimed): {warm['wall_s']} s", flush=True)
    rows, reference = [], None

    def save() -> None:
        """After every row (a run cut at its time limit keeps the finished ones)."""
        W.save_json(args.out, {"machine": host, "settings": {k: str(v) for k, v in vars(args).items()},
                               "skipped_gpu_counts": skipped, "warmup": warm, "rows": rows})

    for k in counts:
        row = bake_on(k, pipeline, args.work, args)
        out = W.outputs(folder / "out")
        if k == 1:
            reference = out
        row.update(compare(reference, out))
        row["verify"] = W.verify(folder / "out")
        row["speedup"] = round(rows[0]["wall_s"] / row["wall_s"], 2) if rows else 1.0
        row["efficiency"] = round(row["speedup"] / k, 3)
        rows.append(row)
        save()
        print(f"{k} GPU(s): {row['wall_s']} s, {row['tasks_per_s']} tasks/s, efficiency {row['efficiency']:.0%}",
              flush=True)

    print(f"\nmachine: {host}  device={args.device}  small={args.small}  logical={args.logical}  "
          f"tasks={args.tasks}  sizes={sizes}")
    print(f"{'GPUs':>4} {'tasks':>5} {'wall s':>8} {'tasks/s':>8} {'speed-up':>8} {'effic.':>7} {'GPU busy':>24} "
          f"{'identical':>10} {'verify':>6}")
    for r in rows:
        busy = "n/a" if not r["gpu_busy"] else " ".join(f"{v:.0%}" for v in r["gpu_busy"].values())
        print(f"{r['gpus']:>4} {r['tasks'] or 0:>5} {r['wall_s']:>8.2f} {r['tasks_per_s']:>8.3f} {r['speedup']:>8.2f} "
              f"{r['efficiency']:>7.0%} {busy:>24} {r['identical_files']:>10} {str(r['verify']):>6}")
    if skipped:
        print(f"not run (this host has {present} GPUs): {skipped}")
    save()
    print(f"wrote {args.out}")
    return 0 if all(r["failed"] == 0 and r["verify"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
