#!/usr/bin/env python3
"""Benchmark: a studio's six-map texture set baked as it is, at 4096^2.

The set is generated (smooth fields and bricks, so every role has structure): albedo,
normal, roughness, metalness, AO and height, laid out as Unreal names and packs them
(``T_Rock_D``, DirectX ``T_Rock_N``, ``T_Rock_ORM``, a 16-bit ``T_Rock_Height``), baked
through ``material = "lib/*"`` alone by ``ntc``, ``mipmap`` and ``neural_material`` at
their production defaults. The baseline in the same run is the same maps named by plain
role (``albedo.png``, ``normal.png``, ...), one per file, what bakery read before it knew
studio naming: detection, channel splitting and the DirectX flip should cost nothing
measurable, and mipmap (deterministic on the GPU) should give the same bytes.

Both sets are generated once and written (PNG level 1: sources the benchmark writes, whose
bytes do not matter) under ``--work``, with a stamp; a later run over the same size and
generator reuses them, so one stage per run (``--stages``, ``--sets``: what fits a call's
time) pays for them once. Each (stage, set) is one bake in a fresh process after an untimed
warm-up bake of a 256^2 set with the same params (Slang's compile cache, shared: neither set
pays for compiling). Each row prints as its bake
ends and the JSON is rewritten then (rows of earlier runs over the same sets kept, a rerun
replacing its own): wall time, the task's own seconds and its phases (load, baselines,
training, metrics, encoding, writing: the task log's phase record), the time outside the
task (process start, planning, report), peak GPU memory above idle and GPU busy % (nvidia-smi
every 200 ms; n/a without it), the stage's headline metrics, and whether the plain set's
outputs equal the studio set's byte for byte. Each bake's tasks print as they end.

    python3 bench/studio_library.py --device vulkan                         # H200: 4096^2, 3 stages
    python3 bench/studio_library.py --device vulkan --stages mipmap         # one stage, both sets
    python3 bench/studio_library.py --size 96 --small --device software     # CPU check

``bash bench/all.sh studio_library_STAGE[_SET]`` runs one stage (and set) of the first.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

import workloads as W

from bakery.phases import parse_log  # noqa: E402  (workloads puts this checkout first on sys.path)

STAGES = ("ntc", "mipmap", "neural_material")
LAYOUTS = ("unreal", "plain")   # the studio set first (the subject), then the plain baseline
SMALL_PARAMS = {"ntc": {"bpp": 16.0, "steps": 20, "batch": 1024}, "mipmap": {"steps": 4, "pairs": 2, "eval_pairs": 2},
                "neural_material": {"steps": 4, "batch": 256, "eval_directions": 2, "finetune_steps": 0}}
WARM_SIZE = 256
METRICS = ("mean_psnr_db", "bpp", "trained_rmse_1_4", "toksvig_rmse_1_4", "psnr_db", "flip", "baseline",
           "baseline_value", "margin_db", "wins")


def generate(size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """role -> float32 [size, size, C] in [0, 1] storage space (normals OpenGL)."""
    rng = np.random.default_rng(seed)
    axis = np.arange(size, dtype=np.float32) / size
    y, x = axis[:, None], axis[None, :]          # broadcast: no full-size coordinate grids
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
            "roughness": np.broadcast_to(np.where(mortar, 0.9, 0.45 + 0.2 * np.cos(13 * x)),
                                         (size, size))[..., None].astype(np.float32),
            "metalness": ((x > 0.75) & (y > 0.75) & ~mortar)[..., None].astype(np.float32),
            "ao": np.where(mortar, 0.55, 1.0)[..., None].astype(np.float32),
            "height": height[..., None]}


def _u8(a: np.ndarray) -> np.ndarray:
    return (np.clip(a, 0, 1) * 255 + 0.5).astype(np.uint8)


def _save(a: np.ndarray, path: Path) -> None:
    """PNG level 1: the benchmark's own sources, written fast (their bytes do not matter)."""
    Image.fromarray(a[..., 0] if a.ndim == 3 and a.shape[2] == 1 else a).save(path, compress_level=1)


def write(folder: Path, maps: dict[str, np.ndarray], layout: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    h16 = np.rint(maps["height"][..., 0] * 65535).astype(np.uint16)
    if layout == "plain":
        for role in ("albedo", "normal", "roughness", "metalness", "ao"):
            _save(_u8(maps[role]), folder / f"{role}.png")
        _save(h16, folder / "height.png")
        return
    dx = _u8(maps["normal"])
    dx[..., 1] = 255 - dx[..., 1]
    _save(_u8(maps["albedo"]), folder / "T_Rock_D.png")
    _save(dx, folder / "T_Rock_N.png")
    _save(_u8(np.concatenate([maps["ao"], maps["roughness"], maps["metalness"]], -1)), folder / "T_Rock_ORM.png")
    _save(h16, folder / "T_Rock_Height.png")


def _generator_id() -> str:
    """Changes when the code that makes the sets does: a stale set is never reused."""
    code = "".join(inspect.getsource(f) for f in (generate, _u8, _save, write))
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def prepare_sets(work: Path, size: int) -> dict:
    """The two sets at ``size`` and the warm-up set under ``work``, generated once: reused
    when the stamp (size, generator) matches. Returns the stamp: where the time went."""
    stamp_path = work / "sets.json"
    want = {"size": size, "generator": _generator_id()}
    if stamp_path.is_file():
        stamp = json.loads(stamp_path.read_text())
        if {k: stamp.get(k) for k in want} == want and all((work / lay / "lib" / "rock").is_dir()
                                                            for lay in (*LAYOUTS, "warm")):
            stamp["reused"] = True
            print(f"sets: reusing the {size}^2 sets under {work} (made in {stamp['generate_s']} s, written in "
                  f"{stamp['write_s']} s)", flush=True)
            return stamp
    for d in (*LAYOUTS, "warm", "digests"):
        shutil.rmtree(work / d, ignore_errors=True)
    stamp_path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    maps = generate(size)
    stamp = dict(want, generate_s=round(time.perf_counter() - t0, 2), write_s={}, bytes={}, reused=False)
    for layout in LAYOUTS:
        t0 = time.perf_counter()
        write(work / layout / "lib" / "rock", maps, layout)
        stamp["write_s"][layout] = round(time.perf_counter() - t0, 2)
        stamp["bytes"][layout] = sum(f.stat().st_size for f in (work / layout / "lib" / "rock").iterdir())
    del maps
    write(work / "warm" / "lib" / "rock", generate(min(size, WARM_SIZE)), "unreal")
    for d in (*LAYOUTS, "warm"):
        W.link_compile_cache(work / d, work)
    W.save_json(stamp_path, {k: v for k, v in stamp.items() if k != "reused"})
    print(f"sets: two {size}^2 six-map sets made in {stamp['generate_s']} s, written (PNG level 1) in "
          f"{stamp['write_s']} s ({ {k: f'{v / 2**20:.1f} MiB' for k, v in stamp['bytes'].items()} }) under {work}",
          flush=True)
    return stamp


def pipeline(folder: Path, stage: str, device: str, small: bool) -> Path:
    params = SMALL_PARAMS[stage] if small else {}
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in params.items())
    text = (f'[project]\nname = "studio"\ncache = "cache"\ndevice = "{device}"\nseed = 1\n\n'
            f'[assets.lib]\nmaterial = "lib/*"\n\n'
            f'[stages.{stage}]\ntype = "{stage}"\ninputs = ["lib"]\nparams = {{ {inline} }}\n')
    (folder / "pipeline.toml").write_text(text)
    return folder / "pipeline.toml"


def clean(folder: Path) -> None:
    """A cold bundle cache and no outputs; Slang's compile cache (cache/device) stays."""
    shutil.rmtree(folder / "out", ignore_errors=True)
    cache = folder / "cache"
    if cache.is_dir():
        for part in cache.iterdir():
            if part.name == "device":
                continue
            if part.is_dir() and not part.is_symlink():
                shutil.rmtree(part)
            else:
                part.unlink()


def headline(report: dict) -> dict:
    task = (report.get("tasks") or [{}])[0]
    metrics = task.get("metrics") or {}
    keep = ("mean_psnr_db", "set_psnr_db", "bpp", "trained_rmse_1_4", "box_rmse_1_4", "toksvig_rmse_1_4",
            "psnr_db", "flip", "constant_psnr_db")
    verdict = task.get("verdict") or {}   # the stage's own baseline, judged in the same bake
    against = {k: verdict[k] for k in ("baseline", "baseline_value", "margin_db", "wins") if k in verdict}
    return {**{k: metrics[k] for k in keep if k in metrics}, **against}


def task_phases(folder: Path, report: dict) -> dict:
    """The task's phase record (bakery.phases) from its log: seconds on its thread, and beside it."""
    task = (report.get("tasks") or [{}])[0]
    log = folder / task["log"] if task.get("log") else None
    record = parse_log(log.read_text(errors="replace")) if log is not None and log.is_file() else None
    if record is None:
        return {}
    return {"phases_s": {k: round(v, 2) for k, v in record["phases"].items()},
            "overlapped_s": {k: round(v, 2) for k, v in record["overlapped"].items()}}


def digests(out: Path) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in W.outputs(out).items() if not k.endswith("manifest.json")}


def compare(work: Path, stage: str, layout: str, mine: dict[str, str]) -> bool | None:
    """Whether this set's outputs equal the other set's (from this run or an earlier one
    over the same sets); None while the other has not been baked."""
    store = work / "digests"
    W.save_json(store / f"{stage}-{layout}.json", mine)
    other = store / f"{stage}-{next(x for x in LAYOUTS if x != layout)}.json"
    return json.loads(other.read_text()) == mine if other.is_file() else None


def bake_row(work: Path, stage: str, layout: str, args) -> dict:
    folder = work / layout
    clean(folder)
    with W.GpuSampler() as gpu:
        run = W.run_bake(pipeline(folder, stage, args.device, args.small), work)
    task = (run["report"].get("tasks") or [{}])[0]
    task_s = task.get("seconds") or 0.0
    row = {"stage": stage, "set": layout, "size": args.size, "exit": run["exit"], "wall_s": round(run["wall_s"], 2),
           "task_s": round(task_s, 2), "outside_task_s": round(run["wall_s"] - task_s, 2),
           **task_phases(folder, run["report"]), "peak_gpu_mib": gpu.peak_mib(),
           "gpu_busy_percent": gpu.busy_percent(), **headline(run["report"])}
    row["same_bytes_as_other_set"] = compare(work, stage, layout, digests(folder / "out")) if run["exit"] == 0 \
        else None
    if run["exit"] != 0:
        row["log"] = run["log"][-1500:]
    return row


HEADER = (f"{'stage':16} {'set':7} {'size':>5} {'wall s':>7} {'task s':>7} {'outside':>7} {'peak GPU MiB':>12} "
          f"{'GPU %':>6} {'same bytes':>10}  task phases s; metrics")


def format_row(r: dict) -> str:
    phases = " ".join(f"{k} {v}" for k, v in (r.get("phases_s") or {}).items() if v >= 0.01)
    metrics = ", ".join(f"{k} {v}" for k, v in r.items() if k in METRICS and not isinstance(v, dict))
    same = r["same_bytes_as_other_set"]
    return (f"{r['stage']:16} {r['set']:7} {r['size']:>5} {r['wall_s']:>7} {r['task_s']:>7} {r['outside_task_s']:>7} "
            f"{str(r['peak_gpu_mib'] if r['peak_gpu_mib'] is not None else 'n/a'):>12} "
            f"{str(r['gpu_busy_percent'] if r['gpu_busy_percent'] is not None else 'n/a'):>6} "
            f"{'-' if same is None else str(same):>10}  {phases}; {metrics}"
            + ("" if r["exit"] == 0 else f"  FAILED (exit {r['exit']})"))


def earlier_rows(out: Path, stamp: dict, settings: dict) -> list[dict]:
    """Rows an earlier run wrote over the same sets, device and step counts (one stage per call)."""
    if not out.is_file():
        return []
    try:
        old = json.loads(out.read_text())
    except ValueError:
        return []
    same = all(old.get("sources", {}).get(k) == stamp[k] for k in ("size", "generator")) \
        and all(old.get("settings", {}).get(k) == settings[k] for k in ("device", "small"))
    return old.get("rows", []) if same else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--device", default="auto", choices=["auto", "vulkan", "software"])
    ap.add_argument("--small", action="store_true", help="tiny step counts (CPU check)")
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--sets", nargs="+", default=list(LAYOUTS), choices=LAYOUTS,
                    help="which sets to bake (the studio set, the plain baseline or both)")
    ap.add_argument("--work", type=Path, default=W.REPO / "bench" / "out" / "studio_library",
                    help="where the sets are written (and reused) and baked")
    ap.add_argument("--out", type=Path, default=W.REPO / "bench" / "out" / "studio_library.json")
    args = ap.parse_args()
    args.work, args.out = args.work.resolve(), args.out.resolve()   # the bakes run in other folders
    args.work.mkdir(parents=True, exist_ok=True)

    stamp = prepare_sets(args.work, args.size)
    sources = dict(stamp)
    settings = {k: str(v) for k, v in vars(args).items()}
    rows = earlier_rows(args.out, stamp, settings)
    machine = W.machine()

    def save() -> None:
        W.save_json(args.out, {"machine": machine, "settings": settings, "sources": sources, "rows": rows})

    save()
    print(HEADER, flush=True)
    for stage in args.stages:
        t0 = time.perf_counter()
        # untimed: the timed bakes' params on a small set, so both sets find the kernels compiled
        clean(args.work / "warm")
        warm = W.run_bake(pipeline(args.work / "warm", stage, args.device, args.small), args.work)
        print(f"  ({stage}: untimed {min(args.size, WARM_SIZE)}^2 warm-up bake, exit {warm['exit']}, "
              f"{time.perf_counter() - t0:.1f} s)", flush=True)
        if warm["exit"] != 0:
            print(warm["log"][-1500:], flush=True)
        for layout in args.sets:
            row = bake_row(args.work, stage, layout, args)
            rows[:] = [r for r in rows if (r["stage"], r["set"]) != (stage, layout)] + [row]
            save()
            print(format_row(row), flush=True)
            if row["exit"] != 0:
                print(row["log"], flush=True)
    print(f"wrote {args.out} ({len(rows)} rows: this run's {len(args.stages) * len(args.sets)} "
          f"and earlier runs' over the same sets)")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
