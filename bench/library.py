#!/usr/bin/env python3
"""Benchmark: a studio library through ntc, mipmap and neural_material, in materials per GPU-hour.

The library is written once per run into a temp folder: ``--count`` materials made by the
sample-asset generator (scripts/make_assets.py: bricks, tiles, cobblestones, each seed a
different material), each laid out as one studio convention names and packs its maps
(plain role names, Unreal ``T_X_D``/DirectX ``_N``/``_ORM``, Substance with a 16-bit height,
glTF ``occlusionRoughnessMetallic``, Unity HDRP ``MaskMap``, ambientCG, Poly Haven ``arm``),
so detection, channel splitting and normal flips run as in a studio's bake. One
pipeline.toml bakes it through ``ntc`` (8 bpp), ``mipmap`` and ``neural_material`` at
production quality, first with cold caches (Slang's and the driver's: a fresh cache folder
and XDG_CACHE_HOME), then again (``--force '*'``) with them warm.

Per bake: materials per GPU-hour (materials / wall hours of the bake, one GPU), wall per
stage (its tasks' seconds), GPU busy % over the bake and over each stage's tasks, and peak
GPU memory above idle (nvidia-smi ``utilization.gpu,memory.used`` every 200 ms; n/a
without nvidia-smi), host seconds by phase per stage (each task's ``phase seconds`` log
line, bakery.phases; ``overlapped`` ran beside training), and the quality each stage
reached against its own baseline in the same run (set PSNR from the mean MSE, RMSE over
materials).

    python3 bench/library.py --device vulkan                               # H200: 100 x 2048^2
    python3 bench/library.py --device vulkan --bake 6                      # the first 6 of them
    python3 bench/library.py --count 4 --size 256 --device software        # CPU check

``bash bench/all.sh library`` runs the first with ``$LIBRARY_ARGS`` appended.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path

import numpy as np
from PIL import Image

import workloads as W

sys.path.insert(0, str(W.REPO / "scripts"))
import make_assets  # noqa: E402  (scripts/ holds the generator)

from bakery.imaging import set_psnr  # noqa: E402
from bakery.phases import PHASES, PHASES_LOG_PREFIX, parse_log  # noqa: E402

#: Stage name in the pipeline -> (type, params): the three stages of a nightly library bake.
STAGES = {"compress": ("ntc", {"bpp": 8.0, "quality": "production"}),
          "mips": ("mipmap", {"quality": "production"}),
          "neural_material": ("neural_material", {"quality": "production"})}
CONVENTIONS = ("plain", "unreal", "substance", "gltf", "unity-hdrp", "ambientcg", "polyhaven")


# -- the library ------------------------------------------------------------------------
def _u8(a: np.ndarray) -> np.ndarray:
    a = np.clip(np.asarray(a, np.float32), 0, 1)
    return (a * 255 + 0.5).astype(np.uint8)


def _save(path: Path, image: np.ndarray, bits: int = 8) -> None:
    """A PNG written fast (level 1: the library is written once, its bytes do not matter)."""
    if bits == 16:
        a = (np.clip(image, 0, 1) * 65535 + 0.5).astype(np.uint16)
    else:
        a = _u8(image)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[..., 0]
    Image.fromarray(a).save(path, compress_level=1)


def write_material(folder: Path, index: int, size: int, seed: int) -> str:
    """Material ``index`` of the library: generator (3) and convention (7) cycle apart, so
    21 materials hold every pair; the seed varies with each."""
    kinds = list(make_assets.MATERIALS)
    kind = kinds[index % len(kinds)]
    convention = CONVENTIONS[index % len(CONVENTIONS)]
    rng = np.random.default_rng(seed + index)
    maps = {r: np.asarray(img, np.float32) for r, (img, _) in
            make_assets.material_maps(*make_assets.MATERIALS[kind](rng, size)).items()}
    maps = {r: (a if a.ndim == 3 else a[..., None]) for r, a in maps.items()}
    write_convention(folder, f"{kind.capitalize()}{index:03d}", convention, maps)
    return convention


#: Per convention: the file name pattern ({n}: the material's name; {l}: it in lower case)
#: and the map each file holds. dx: the normal in DirectX's convention (green flipped);
#: orm: AO, roughness, metalness packed; mask: Unity HDRP's mask map; height16: a 16-bit height.
FILES = {
    "plain": {"albedo.png": "albedo", "normal.png": "normal", "roughness.png": "roughness",
              "metalness.png": "metalness", "ao.png": "ao", "height.png": "height16"},
    "unreal": {"T_{n}_D.png": "albedo", "T_{n}_N.png": "dx", "T_{n}_ORM.png": "orm"},
    "substance": {"{n}_BaseColor.png": "albedo", "{n}_Normal.png": "normal", "{n}_Roughness.png": "roughness",
                  "{n}_Metallic.png": "metalness", "{n}_Mixed_AO.png": "ao", "{n}_Height.png": "height16"},
    "gltf": {"{n}_baseColor.png": "albedo", "{n}_normal.png": "normal", "{n}_occlusionRoughnessMetallic.png": "orm"},
    "unity-hdrp": {"{n}_BaseColorMap.png": "albedo", "{n}_NormalMap.png": "normal", "{n}_MaskMap.png": "mask"},
    "ambientcg": {"{n}_2K-PNG_Color.png": "albedo", "{n}_2K-PNG_NormalGL.png": "normal",
                  "{n}_2K-PNG_Roughness.png": "roughness", "{n}_2K-PNG_Metalness.png": "metalness",
                  "{n}_2K-PNG_AmbientOcclusion.png": "ao", "{n}_2K-PNG_Displacement.png": "height16"},
    "polyhaven": {"{l}_diff_2k.png": "albedo", "{l}_nor_dx_2k.png": "dx", "{l}_arm_2k.png": "orm",
                  "{l}_disp_2k.png": "height16"},
}


def write_convention(folder: Path, name: str, convention: str, m: dict[str, np.ndarray]) -> None:
    """``m`` (role -> [H, W, C] in [0, 1], normals OpenGL) named and packed as ``convention``
    ships it (FILES)."""
    if convention not in FILES:
        raise ValueError(convention)
    folder.mkdir(parents=True, exist_ok=True)
    dx = m["normal"].copy()
    dx[..., 1] = 1.0 - dx[..., 1]
    maps = dict(m, dx=dx, orm=np.concatenate([m["ao"], m["roughness"], m["metalness"]], -1),
                mask=np.concatenate([m["metalness"], m["ao"], np.ones_like(m["ao"]), 1.0 - m["roughness"]], -1))
    for pattern, key in FILES[convention].items():
        bits = 16 if key == "height16" else 8
        _save(folder / pattern.format(n=name, l=name.lower()), maps["height" if bits == 16 else key], bits)


def write_library(root: Path, count: int, size: int, seed: int, workers: int) -> dict[str, int]:
    """``count`` materials under root/lib/NNN (in parallel); how many of each convention."""
    folders = [root / "lib" / f"m{i:03d}" for i in range(count)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        conventions = list(pool.map(write_material, folders, range(count), [size] * count, [seed] * count))
    return {c: conventions.count(c) for c in CONVENTIONS if c in conventions}


def write_pipeline(root: Path, device: str) -> Path:
    lines = ["[project]", 'name = "library"', 'out = "out"', 'cache = "cache"', f'device = "{device}"', "seed = 1", "",
             "[assets.lib]", 'material = "lib/*"', ""]
    for name, (kind, params) in STAGES.items():
        inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in params.items())
        lines += [f"[stages.{name}]", f'type = "{kind}"', 'inputs = ["lib"]', f"params = {{ {inline} }}", ""]
    path = root / "pipeline.toml"
    path.write_text("\n".join(lines))
    return path


# -- measuring ----------------------------------------------------------------------------
class Progress:
    """A bake's figures so far, from its task lines as they come: a bake of a library runs
    longer than a benchmark call may, so a run cut at its limit still gives materials per
    GPU-hour (finished tasks / stages, over the wall so far), GPU busy and peak memory,
    printed every ``every`` tasks and handed to ``save`` (the JSON) after each task."""

    def __init__(self, caches: str, stages: int, total_tasks: int, gpu: W.GpuSampler, save, every: int | None = None):
        self.caches, self.stages, self.total, self.gpu = caches, stages, total_tasks, gpu
        self.save, self.every = save, every or max(1, min(10, total_tasks // 10))
        self.started = time.perf_counter()
        self.per_stage: dict[str, dict] = {}
        self.done = 0

    def on_task(self, line: str) -> None:
        m = W.TASK_DONE.search(line)
        row = self.per_stage.setdefault(m["stage"], {"built": 0, "failed": 0, "other": 0, "task_s": 0.0})
        row[m["status"] if m["status"] in ("built", "failed") else "other"] += 1
        row["task_s"] = round(row["task_s"] + float(m["seconds"] or 0.0), 2)
        self.done += 1
        summary = self.summary()
        self.save(summary)
        if self.done % self.every == 0 or self.done == self.total:
            busy = summary["gpu_busy_percent"]
            print(f"  so far ({self.caches}): {self.done}/{self.total} tasks in {summary['wall_s']} s, "
                  f"{_na(summary['materials_per_gpu_hour'])} materials/GPU-hour (tasks built / {self.stages}), "
                  f"GPU busy {_na(busy)}{'' if busy is None else '%'}, peak {_na(summary['peak_gpu_mib'])} MiB; "
                  + ", ".join(f"{k} {v['built']} built ({v['task_s']} s)" for k, v in self.per_stage.items()),
                  flush=True)

    def summary(self) -> dict:
        wall = time.perf_counter() - self.started
        built = sum(v["built"] for v in self.per_stage.values())
        return {"caches": self.caches, "partial": True, "tasks_done": self.done, "tasks": self.total,
                "wall_s": round(wall, 2), "stages": self.per_stage,
                "materials_per_gpu_hour": round(built / self.stages / (wall / 3600.0), 1) if wall > 0 else None,
                "gpu_busy_percent": self.gpu.busy_percent(), "peak_gpu_mib": self.gpu.peak_mib()}


def bake(pipeline: Path, env: dict, *args: str, progress=None) -> dict:
    """One bake in a fresh process, its tasks' lines echoed (and handed to ``progress``) as they end."""
    report = pipeline.parent / "bench-report.json"
    report.unlink(missing_ok=True)
    with W.GpuSampler() as gpu:
        if progress is not None:
            progress.gpu = gpu
            progress.started = time.perf_counter()
        t0 = time.perf_counter()
        code, log = W.run_streamed([sys.executable, "-m", "bakery", "bake", str(pipeline), "--report", str(report),
                                    *args], cwd=pipeline.parent, env=env, tail_chars=3000,
                                   on_task=progress.on_task if progress is not None else None)
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "exit": code, "report": json.loads(report.read_text()) if report.is_file() else {},
            "log": log, "gpu_busy_percent": gpu.busy_percent(),
            "peak_gpu_mib": gpu.peak_mib(), "gpu_samples": gpu.count(), "gpu": gpu}


def _logged_at(line: str) -> float | None:
    """Epoch seconds of a task log line (``2026-01-02 03:04:05,678 INFO ...``, local time)."""
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def stage_phases(root: Path, stage: str, assets: list[str]) -> tuple[dict, dict, list[tuple[float, float]]]:
    """Summed phase seconds (the task's thread; and beside it) over a stage's task logs,
    and each task's window (epoch s: its phase line's time less its wall time)."""
    on, beside, windows = {}, {}, []
    for asset in assets:
        log = root / "out" / "logs" / stage / f"{asset}.log"
        text = log.read_text(errors="replace") if log.is_file() else ""
        record = parse_log(text)
        if record is None:
            continue
        ended = next((_logged_at(ln) for ln in reversed(text.splitlines()) if PHASES_LOG_PREFIX in ln), None)
        if ended is not None:
            windows.append((ended - record["wall_s"], ended))
        for k, v in record["phases"].items():
            on[k] = on.get(k, 0.0) + v
        for k, v in record["overlapped"].items():
            beside[k] = beside.get(k, 0.0) + v
    order = list(PHASES) + ["other"]
    return ({k: round(on[k], 2) for k in order if k in on}, {k: round(beside[k], 2) for k in order if k in beside},
            windows)


def _rms(values: list[float]) -> float:
    return round(math.sqrt(sum(v * v for v in values) / len(values)), 6)


def stage_quality(stage_type: str, tasks: list[dict]) -> dict:
    """The set's quality against the stage's own baseline, measured in the same run."""
    m = [t.get("metrics") or {} for t in tasks if t.get("status") == "built"]
    if not m:
        return {}
    losing = sum(1 for t in tasks if (t.get("verdict") or {}).get("wins") is False)
    q: dict = {"losing_to_baseline": losing}
    if stage_type == "ntc":
        q["set_psnr_db"] = round(set_psnr([x["set_psnr_db"] for x in m]), 3)
        theirs = [t["verdict"]["baseline_value"] for t in tasks if t.get("status") == "built" and t.get("verdict")]
        if theirs:
            q["bcn_same_bytes_set_psnr_db"] = round(set_psnr(theirs), 3)
        q["bpp"] = round(float(np.mean([x["bpp"] for x in m])), 4)
    elif stage_type == "mipmap":
        for k in ("trained", "box", "toksvig", "vmf"):
            q[f"{k}_rmse_1_4"] = _rms([x[f"{k}_rmse_1_4"] for x in m])
    elif stage_type == "neural_material":
        q["set_psnr_db"] = round(set_psnr([x["psnr_db"] for x in m]), 3)
        q["uniform_set_psnr_db"] = round(set_psnr([x["uniform_psnr_db"] for x in m]), 3)
        q["mean_flip"] = round(float(np.mean([x["flip"] for x in m])), 5)
    return q


def summarise(root: Path, run: dict, count: int, caches: str) -> dict:
    tasks = run["report"].get("tasks") or []
    stages = {}
    for name, (kind, _) in STAGES.items():
        mine = [t for t in tasks if t.get("stage") == name]
        on, beside, windows = stage_phases(root, name, [t["asset"] for t in mine if t.get("status") == "built"])
        stages[name] = {"type": kind, "built": sum(t.get("status") == "built" for t in mine),
                        "failed": sum(t.get("status") == "failed" for t in mine),
                        "wall_s": round(sum(t.get("seconds") or 0.0 for t in mine), 2),
                        "gpu_busy_percent": run["gpu"].busy_percent(windows) if windows else None,
                        "phases_s": on, "overlapped_s": beside, "tasks_with_phases": len(windows),
                        # the tasks' own thread outside training: where the trainer (the GPU) waits
                        "host_on_path_s": round(sum(v for k, v in on.items() if k != "training"), 2),
                        "quality": stage_quality(kind, mine)}
    built_all = min(s["built"] for s in stages.values())
    row = {"caches": caches, "exit": run["exit"], "wall_s": round(run["wall_s"], 2), "materials": count,
           "materials_per_gpu_hour": round(built_all / (run["wall_s"] / 3600.0), 1) if run["wall_s"] > 0 else None,
           "gpu_busy_percent": run["gpu_busy_percent"], "peak_gpu_mib": run["peak_gpu_mib"],
           "gpu_samples": run["gpu_samples"], "stages": stages}
    if run["exit"] != 0:
        row["log"] = run["log"]
    return row


def _na(v) -> str:
    return "n/a" if v is None else str(v)


def print_tables(rows: list[dict]) -> None:
    print(f"\n{'caches':7} {'materials':>9} {'wall s':>9} {'materials/GPU-h':>15} {'GPU busy %':>10} "
          f"{'peak GPU MiB':>12}  stage wall s (GPU busy)")
    for r in rows:
        walls = ", ".join(f"{k} {s['wall_s']} (GPU {_na(s['gpu_busy_percent'])}"
                          f"{'' if s['gpu_busy_percent'] is None else '%'})" for k, s in r["stages"].items())
        print(f"{r['caches']:7} {r['materials']:>9} {r['wall_s']:>9} {_na(r['materials_per_gpu_hour']):>15} "
              f"{_na(r['gpu_busy_percent']):>10} {_na(r['peak_gpu_mib']):>12}  {walls}"
              + ("" if r["exit"] == 0 else f"  FAILED (exit {r['exit']})"))
    cols = list(PHASES) + ["other"]
    print("\nhost seconds by phase, summed over a stage's tasks (+x: beside training, overlapped; "
          "not training: the sum of the tasks' own thread outside training)")
    print(f"{'caches':7} {'stage':16} " + " ".join(f"{c:>13}" for c in cols) + f" {'not training':>13}")
    for r in rows:
        for name, s in r["stages"].items():
            cells = []
            for c in cols:
                v, o = s["phases_s"].get(c), s["overlapped_s"].get(c)
                cells.append(f"{'' if v is None else v}{'' if o is None else f' +{o}'}" or "-")
            print(f"{r['caches']:7} {name:16} " + " ".join(f"{c:>13}" for c in cells) + f" {s['host_on_path_s']:>13}")
    print("\nquality against each stage's own baseline, same run")
    for r in rows:
        for name, s in r["stages"].items():
            q = ", ".join(f"{k} {v}" for k, v in s["quality"].items())
            print(f"{r['caches']:7} {name:16} {q}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100, help="materials in the library")
    ap.add_argument("--bake", type=int, default=0, help="bake only the first N of them (0: all), where "
                    "the machine's time allows no more; the figures are per material baked")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--device", default="auto", choices=["auto", "vulkan", "software"])
    ap.add_argument("--seed", type=int, default=make_assets.SEED)
    ap.add_argument("--jobs", default="auto", help="bakery bake --jobs (N or auto, the bake's default)")
    ap.add_argument("--caches", nargs="+", default=["cold", "warm"], choices=["cold", "warm"],
                    help="bakes in turn: cold empties the caches first, warm keeps them (rows say which they had)")
    ap.add_argument("--work", type=Path, default=None, help="library folder (default: a temp folder, removed)")
    ap.add_argument("--out", type=Path, default=W.REPO / "bench" / "out" / "library.json")
    args = ap.parse_args()
    args.out = args.out.resolve()   # the bakes run in the library folder

    root = args.work.resolve() if args.work else Path(tempfile.mkdtemp(prefix="bakery-library-"))
    try:
        shutil.rmtree(root / "lib", ignore_errors=True)
        print(f"library: writing {args.count} materials at {args.size}^2 under {root}", flush=True)
        t0 = time.perf_counter()
        conventions = write_library(root, args.count, args.size, args.seed, workers=max(1, (os.cpu_count() or 2) - 1))
        written_s = time.perf_counter() - t0
        baked = min(args.bake or args.count, args.count)
        print(f"library: {args.count} materials at {args.size}^2 written in {written_s:.1f} s ({conventions}); "
              f"baking {baked}", flush=True)
        pipeline = write_pipeline(root, args.device)
        env = W.bake_env(root)
        env["XDG_CACHE_HOME"] = str(root / "xdg")   # Slang, Mesa and driver caches: cold at first
        rows, machine = [], W.machine()

        def save(partial: dict | None = None) -> None:
            W.save_json(args.out, {"machine": machine, "settings": {k: str(v) for k, v in vars(args).items()},
                                   "stages": {k: {"type": t, "params": p} for k, (t, p) in STAGES.items()},
                                   "library": {"materials": args.count, "baked": baked, "conventions": conventions,
                                               "written_s": round(written_s, 1)},
                                   "rows": rows, **({"in_progress": partial} if partial else {})})

        save()
        for caches in args.caches:
            if caches == "cold":
                for d in ("out", "cache", "xdg"):
                    shutil.rmtree(root / d, ignore_errors=True)
            jobs = ["--jobs", str(args.jobs)]
            subset = [a for i in range(baked) for a in ("--asset", f"lib/m{i:03d}")] if baked < args.count else []
            device_cache = root / "cache" / "device"
            state = "warm" if device_cache.is_dir() and any(device_cache.iterdir()) else "cold"  # as they were
            print(f"{state} bake of {baked} materials x {len(STAGES)} stages: started", flush=True)
            progress = Progress(state, len(STAGES), baked * len(STAGES), None, save)
            run = bake(pipeline, env, "--force", "*", *jobs, *subset, progress=progress)
            rows.append(summarise(root, run, baked, state))
            print(f"{state} bake: exit {run['exit']} in {run['wall_s']:.1f} s", flush=True)
            save()                                               # after each bake: a run cut short keeps its rows
            print_tables(rows[-1:])                              # each bake's tables as soon as it ends
        if len(rows) > 1:
            print("\n-- all bakes --")
            print_tables(rows)
        print(f"wrote {args.out}")
        return 0 if all(r["exit"] == 0 for r in rows) else 1
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
