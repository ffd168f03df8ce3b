"""Benchmark: the procedural search's fitting step, on its own.

One generation's fit as the search runs it: the generated suite's ten programs (bench/
procedural.py's GENERATED) as structures, each with `--restarts` perturbed starts, every
job sampling `--batch` pixels of a 128^2 target per step, with the texture term (the
statistics dispatch, then the backward one) and without it (the pixel loss alone). Per
form (the interpreter, or compiled structures): ms per step over `--steps` steps after a
warm-up fit (wall clock; the fit's render and scoring at the end included once), and the
compile seconds of the warm-up. The losses of each fit are printed too, so two trees run
with the same arguments can be checked for giving the same fits.

`--search NAME` also runs one whole search on that generated target (256^2) with the GPU
preset's budget (bakery/stages/procedural/stage.py), `--search-steps` steps per fit, through
the chosen form, and splits its seconds into compiling, device wait and the host's own
work, as the stage's log line does: the GPU path's host work, measurable on a CPU device.

    python3 bench/procedural_fit.py --device vulkan                 # H200: the interpreter
    python3 bench/procedural_fit.py --device software --steps 4     # CPU: both forms
    python3 bench/procedural_fit.py --device software --steps 4 --forms interpreter --search checker_ramp
Prints a table and writes JSON (bench/out/procedural_fit.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.baselines.resample import downsample_area  # noqa: E402
from bakery.device import open_device  # noqa: E402
from bakery.stages.procedural import dsl, fit, texture_stats  # noqa: E402
from bakery.stages.procedural.proposers import make_proposers  # noqa: E402
from bakery.stages.procedural.render import render_shader  # noqa: E402
from bakery.stages.params import AUTO  # noqa: E402
from bakery.stages.procedural.search import Search, tiling  # noqa: E402
from bakery.stages.procedural.stage import PRESETS, DeviceSplit, Procedural, search_config  # noqa: E402
from bench.procedural import GENERATED  # noqa: E402


def jobs_of(restarts: int, seed: int) -> tuple[list, list]:
    """Every generated program's structure, and `restarts` starts of each: its own values
    times (1 + 5% noise), as a search's restarts start near a located guess."""
    rng = np.random.default_rng(seed)
    programs = [dsl.from_json(obj, require_params=True) for obj in GENERATED.values()]
    jobs = []
    for s, p in enumerate(programs):
        values = dsl.flatten(p)
        jobs += [(s, values * (1.0 + 0.05 * rng.normal(size=len(values)))) for _ in range(restarts)]
    return [p.structure() for p in programs], jobs


def measure(device, target, structures, jobs, *, texture: bool, interpret: bool, batch: int, steps: int) -> dict:
    stats = texture_stats.statistics(target)
    config = fit.FitConfig(steps=1, batch=batch, texture_weight=1.0 if texture else 0.0, interpret=interpret)
    cache = getattr(device, "kernel_cache", None)
    compiled = getattr(cache, "compile_s", 0.0)
    start = time.perf_counter()
    fit.fit_jobs(device, target, stats, structures, jobs, config)  # builds the kernels
    warm_up = time.perf_counter() - start
    compile_s = getattr(cache, "compile_s", 0.0) - compiled
    config = fit.FitConfig(steps=steps, batch=batch, texture_weight=config.texture_weight, interpret=interpret)
    start = time.perf_counter()
    results = fit.fit_jobs(device, target, stats, structures, jobs, config)
    wall = time.perf_counter() - start
    losses = [r.pixel_mse + config.texture_weight * r.texture_loss for r in results]
    return {"form": "interpreter" if interpret else "compiled", "loss": "pixel + texture" if texture else "pixel",
            "ms_per_step": round(1000.0 * wall / steps, 3), "warm_up_s": round(warm_up, 2),
            "compile_s": round(compile_s, 2), "mean_loss": float(np.mean(losses)),
            "first_losses": [float(x) for x in losses[:3]]}


def search(device, name: str, steps: int, interpret: bool) -> dict:
    """One search on generated target ``name`` at 256^2 with the GPU production preset's
    budget but ``steps`` per fit (refinement at most twice that), the stage's defaults
    otherwise: wall seconds split as DeviceSplit splits them, and the loss found."""
    defaults = {p.name: p.default for p in Procedural.params if p.default != AUTO}
    used = {**defaults, **PRESETS.table["gpu"]["production"], "steps": steps}
    used["refine_steps"] = min(used["refine_steps"], 2 * steps)
    target = render_shader(device, dsl.from_json(GENERATED[name], require_params=True), 256, 256)[:, :, :3]
    size = min(256, used["fit_size"])
    config = search_config(used, tiling(target)[0], interpret)
    builtin, command = make_proposers("builtin", None)
    split = DeviceSplit(device)
    best = Search(device, downsample_area(target, size, size), config, builtin, command, seed=0,
                  detail=target).run()
    split.lap("search")
    return {"target": name, "steps": steps, "form": "interpreter" if interpret else "compiled",
            **split.record, "pixel_mse": best.pixel_mse, "nodes": best.nodes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=["auto", "vulkan", "cuda", "software"])
    ap.add_argument("--size", type=int, default=128, help="target size (the GPU preset's fit size)")
    ap.add_argument("--batch", type=int, default=4096, help="pixels per job and step (the GPU preset's)")
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--forms", default=None, help="interpreter,compiled (default: the interpreter on a GPU, both on a CPU)")
    ap.add_argument("--search", default=None, help="also one whole search on this generated target (see above)")
    ap.add_argument("--search-steps", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "procedural_fit.json"))
    a = ap.parse_args()
    device = open_device(a.device)
    forms = a.forms.split(",") if a.forms else (["interpreter", "compiled"] if device.info.software else ["interpreter"])
    target = render_shader(device, dsl.from_json(GENERATED["bricks"], require_params=True), a.size, a.size)[:, :, :3]
    structures, jobs = jobs_of(a.restarts, seed=0)
    print(f"device: {device.info.adapter} ({device.info.backend}); {len(jobs)} jobs ({len(structures)} structures x {a.restarts} starts), "
          f"{a.batch} pixels each of {a.size}^2, {a.steps} steps")
    rows = []
    print(f"{'form':12s} {'loss':16s} {'ms/step':>9s} {'warm-up s':>10s} {'compile s':>10s} {'mean loss':>11s}")
    for form in forms:
        for texture in (True, False):
            row = measure(device, target, structures, jobs, texture=texture, interpret=form == "interpreter",
                          batch=a.batch, steps=a.steps)
            rows.append(row)
            print(f"{row['form']:12s} {row['loss']:16s} {row['ms_per_step']:9.3f} {row['warm_up_s']:10.2f} "
                  f"{row['compile_s']:10.2f} {row['mean_loss']:11.4g}", flush=True)
    searched = []
    for form in forms if a.search else []:
        r = search(device, a.search, a.search_steps, form == "interpreter")
        searched.append(r)
        print(f"search {a.search} ({form}, {a.search_steps} steps per fit): {r['search_s']:.1f} s = compile "
              f"{r['search_compile_s']:.1f} s ({r['search_kernels']} kernels) + device wait "
              f"{r['search_device_wait_s']:.1f} s + host {r['search_host_s']:.1f} s; pixel MSE "
              f"{r['pixel_mse']:.3g}, {r['nodes']} nodes", flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device.info.to_dict(), "size": a.size, "batch": a.batch, "jobs": len(jobs),
                               "steps": a.steps, "rows": rows, "searches": searched}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
