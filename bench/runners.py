#!/usr/bin/env python3
"""Benchmark: the same bake through each runner on one machine.

Workloads: the default pipeline (pipeline.toml over assets/) and a 50-asset pipeline (25
textures + 25 materials cut from assets/ at several sizes), both with pipeline.toml's
stages. Modes: the local runner, ``--jobs N`` (N worker processes sharing the GPU, so CPU
work overlaps training), and ``--runner ray`` (a local Ray cluster the bake starts: one
actor per GPU, or N sharing it with ``--jobs N``). Each workload is baked once untimed
(fills the Slang compile caches, shared by every mode), then each mode rebuilds every task
(``--force``) in a fresh process. Prints wall time, speed-up over the local runner,
task-seconds per wall second, GPU busy share (nvidia-smi, sampled every 200 ms), whether
the outputs equal the local runner's byte for byte and whether ``bakery verify`` passes;
writes bench/out/runners.json.

    python3 bench/runners.py                         # GPU: pipeline.toml's params, 128-512 px
    python3 bench/runners.py --small --device software   # CPU dry run: tiny params, 32-64 px
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import workloads as W


def modes(jobs: list[int], ray: bool, ray_jobs: bool) -> list[tuple[str, list[str]]]:
    found = [("local", [])] + [(f"jobs {n}", ["--jobs", str(n)]) for n in jobs]
    if ray:
        found += [("ray", ["--runner", "ray"])]
        if ray_jobs:
            found += [(f"ray x{n}/gpu", ["--runner", "ray", "--jobs", str(n)]) for n in jobs[:1]]
    return found


def prepare(work: Path, name: str, small: bool, device: str, n_assets: int, stages: set[str] | None,
            overrides: dict[str, dict]) -> Path:
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if name == "default":
        if small:
            W.resample_assets(folder, textures=2, materials=3, sizes=[64])
        else:
            W.copy_sample_assets(folder)
    else:
        sizes = [32, 48, 64] if small else [128, 256, 512]
        W.resample_assets(folder, textures=n_assets // 2, materials=n_assets - n_assets // 2, sizes=sizes, seed=7)
    W.link_compile_cache(folder, work)
    return W.write_pipeline(folder, small=small, device=device, stages=stages, overrides=overrides)


def parse_overrides(items: list[str]) -> dict[str, dict]:
    """STAGE.KEY=VALUE (VALUE as TOML) -> {stage: {key: value}}."""
    import tomllib

    found: dict[str, dict] = {}
    for item in items:
        target, _, value = item.partition("=")
        stage, _, key = target.partition(".")
        found.setdefault(stage, {})[key] = tomllib.loads(f"v = {value}")["v"]
    return found


def save(args, rows: list[dict]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": W.machine(), "settings": vars(args) | {"work": str(args.work),
                                                                                        "out": str(args.out)},
                                    "rows": rows}, indent=1, default=str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="tiny params and images (CPU dry run)")
    ap.add_argument("--device", default="auto", choices=["auto", "vulkan", "software"])
    ap.add_argument("--jobs", default="2,4", help="comma-separated --jobs values to time")
    ap.add_argument("--assets", type=int, default=50, help="assets of the large workload")
    ap.add_argument("--large-stages", help="comma-separated pipeline.toml stages of the large workload "
                    "(default: all over textures and materials)")
    ap.add_argument("--large-set", action="append", default=[], metavar="STAGE.KEY=VALUE",
                    help="a stage param of the large workload (VALUE in TOML), e.g. texture.quality='preview'")
    ap.add_argument("--default-set", action="append", default=[], metavar="STAGE.KEY=VALUE",
                    help="a stage param of the default workload (STAGE '*': every stage), e.g. *.quality='preview'")
    ap.add_argument("--workloads", default="default,large", help="which workloads: default, large or both")
    ap.add_argument("--no-ray", action="store_true", help="leave out the Ray modes")
    ap.add_argument("--no-ray-jobs", action="store_true", help="leave out Ray with several actors per GPU")
    ap.add_argument("--work", type=Path, default=W.REPO / "bench" / "out" / "runners-work")
    ap.add_argument("--out", type=Path, default=W.REPO / "bench" / "out" / "runners.json")
    args = ap.parse_args()
    args.work, args.out = args.work.resolve(), args.out.resolve()   # the bakes run in the workload folders
    jobs = [int(j) for j in args.jobs.split(",") if j]
    ray_ok = not args.no_ray
    if ray_ok:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray is not installed (pip install 'bakery[ray]'): leaving out the Ray modes", file=sys.stderr)
            ray_ok = False
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    chosen = args.workloads.split(",")
    names = (["default"] if "default" in chosen else []) + ([f"{args.assets}-assets"] if "large" in chosen else [])
    for name in names:
        large = name != "default"
        stages = set(args.large_stages.split(",")) if args.large_stages and large else None
        pipeline = prepare(args.work, name, args.small, args.device, args.assets, stages,
                           parse_overrides(args.large_set if large else args.default_set))
        warm = W.run_bake(pipeline, args.work)
        if warm["exit"] != 0:
            print(f"{name}: the untimed first bake failed (exit {warm['exit']}):\n{warm['log']}", file=sys.stderr)
            return 1
        reference = W.outputs(pipeline.parent / "out")
        base = None
        for mode, extra in modes(jobs, ray_ok, not args.no_ray_jobs):
            with W.GpuSampler() as gpu:
                r = W.run_bake(pipeline, args.work, "--force", *extra)
            out = W.outputs(pipeline.parent / "out")
            same = sum(1 for k, v in out.items() if reference.get(k) == v)
            differing = sorted(k for k in reference.keys() | out.keys() if reference.get(k) != out.get(k))
            totals = r["report"].get("totals", {})
            row = {"workload": name, "mode": mode, "args": extra, "exit": r["exit"], "wall_s": round(r["wall_s"], 2),
                   "tasks": totals.get("total"), "built": totals.get("built"),
                   "task_s_per_wall_s": round(W.task_seconds(r["report"]) / r["wall_s"], 2),
                   "gpu_busy": gpu.busy(), "identical_files": f"{same}/{len(reference)}",
                   "verify": W.verify(pipeline.parent / "out"), "device": r["report"].get("device"),
                   "differing_files": differing[:20]}
            if mode == "local":
                base = r["wall_s"]
                # what the device's presets reached: each task's metrics from the local bake
                row["task_metrics"] = {f"{t['stage']}/{t['asset']}": t.get("metrics")
                                       for t in r["report"].get("tasks", [])}
            row["speedup"] = round(base / r["wall_s"], 2) if base else None
            if r["exit"] != 0:
                row["log"] = r["log"]
            rows.append(row)
            save(args, rows)  # after every row: a run cut at its time limit keeps what it measured
            print(f"{name:>10} {mode:>12}: {row['wall_s']:7.2f} s  x{row['speedup']}  exit {r['exit']}", flush=True)

    print(f"\nmachine: {W.machine()}  device={args.device}  small={args.small}  jobs={jobs}")
    print(f"{'workload':<10} {'mode':<12} {'tasks':>5} {'wall s':>8} {'speed-up':>8} {'task-s/s':>8} "
          f"{'GPU busy':>9} {'identical':>10} {'verify':>6}")
    for r in rows:
        busy = "n/a" if not r["gpu_busy"] else " ".join(f"{v:.0%}" for v in r["gpu_busy"].values())
        print(f"{r['workload']:<10} {r['mode']:<12} {r['tasks'] or 0:>5} {r['wall_s']:>8.2f} {r['speedup'] or 0:>8.2f} "
              f"{r['task_s_per_wall_s']:>8.2f} {busy:>9} {r['identical_files']:>10} {str(r['verify']):>6}")
    for r in rows:
        if r.get("task_metrics") and r["workload"] == "default":
            print("\nquality reached by the local bake of the default pipeline (stage/asset: metrics):")
            for task, met in r["task_metrics"].items():
                shown = {k: v for k, v in (met or {}).items() if not isinstance(v, (dict, list))}
                print(f"  {task:<40} {shown}")
    save(args, rows)
    print(f"wrote {args.out}")
    return 0 if all(r["exit"] == 0 and r["verify"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
