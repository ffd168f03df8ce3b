"""Benchmark: stage `procedural` over a suite of targets.

Targets: images drawn by known small programs (their complexity is the reference) and the
stochastic sample textures in assets/textures. Per target: PSNR, whether it is recovered
(>= 35 dB within the generator's nodes + 2), texture loss (Gram statistics,
bakery/stages/procedural/texture_stats.py), complexity (nodes), instruction estimate,
whether target and program tile, program bytes against PNG and BC7 bytes, wall time and the
worker's CPU time (all its threads: on a shared machine the wall time also counts others'
load), and where the time went: the search, the outputs and the baseline, each split into
kernel compiling (seconds and kernels), waiting for the device, and the host's own work
(the stage's "procedural seconds" log line, bakery/stages/procedural/stage.py). For the
stochastic ones the baseline in the same run: a `neural_texture` whose fp16 weights take at
most as many bytes as the program's compact JSON, scored with the same texture loss (the
stage trains it: bakery/stages/procedural/neural_baseline.py).

Each target's row is printed as it finishes and the JSON rewritten after it, so a run cut
by a time limit keeps what it finished; a target that fails gets a row with its one-line
error and the others go on. Each worker's numpy/BLAS threads are capped (--threads), so
workers x threads does not oversubscribe the host's cores.

    python3 bench/procedural.py --device vulkan --workers 6    # H200: 6 targets at once share the GPU
    python3 bench/procedural.py --device software --small                # CPU smoke run
    python3 bench/procedural.py --device software --nt-steps 300         # 256^2 at the CPU preset
Prints a table and writes JSON (bench/out/procedural.json).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.baselines.resample import downsample_area  # noqa: E402
from bakery.cli import main as cli_main  # noqa: E402
from bakery.device import open_device  # noqa: E402
from bakery.formats.images import encode_png, load_image  # noqa: E402
from bakery.stages.procedural import dsl  # noqa: E402
from bakery.stages.procedural.render import render_shader  # noqa: E402
from bakery.stages.procedural.stage import SECONDS_LOG_PREFIX  # noqa: E402

#: Environment variables that cap a worker's numpy/BLAS/OpenMP threads (read when the
#: worker starts, before it imports numpy).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _ramp(child, colours, positions=(0.0, 1.0)):
    return {"op": "ramp", "attrs": {"stops": len(positions)},
            "params": {"positions": list(positions), "colours": list(colours)}, "inputs": [child]}


GENERATED = {
    "striped_gradient": _ramp({"op": "add", "inputs": [
        {"op": "stripes_sine", "params": {"k": [6, 2], "phase": [0.3]}},
        {"op": "linear_gradient", "params": {"k": [0.5, 0], "offset": [0]}}]}, [0.1, 0.1, 0.4, 1.0, 0.9, 0.3], (0, 1.5)),
    "checker_ramp": _ramp({"op": "checker", "params": {"frequency": [8], "offset": [0.1, 0.2]}},
                          [0.1, 0.2, 0.3, 0.9, 0.8, 0.6]),
    "bricks": _ramp({"op": "bricks", "params": {"count": [4, 8], "offset": [0, 0], "mortar": [0.012]}}, [0.8, 0.8, 0.75, 0.6, 0.2, 0.1]),
    "saw_bands": _ramp({"op": "stripes_saw", "params": {"k": [0, 5], "phase": [0.1]}},
                       [0.2, 0.3, 0.1, 0.9, 0.9, 0.5, 0.3, 0.1, 0.1], (0.0, 0.6, 1.0)),
    "rings": _ramp({"op": "polar", "params": {"center": [0.5, 0.5], "scale": [1]}, "inputs": [
        {"op": "stripes_sine", "params": {"k": [0, 8], "phase": [0]}}]}, [0.9, 0.85, 0.7, 0.3, 0.15, 0.05]),
    "spotlight": _ramp({"op": "radial_gradient", "params": {"center": [0.4, 0.55], "scale": [1.6], "offset": [0]}},
                       [1.0, 0.95, 0.7, 0.1, 0.1, 0.2]),
    "cells": _ramp({"op": "worley", "params": {"frequency": [6], "jitter": [0.9], "offset": [0.3, 0.7]}},
                   [0.05, 0.1, 0.2, 0.6, 0.8, 0.9]),
    "clouds": _ramp({"op": "fbm", "attrs": {"octaves": 4, "basis": "gradient"},
                     "params": {"frequency": [4], "gain": [0.5], "offset": [1, 2]}},
                    [0.2, 0.4, 0.8, 0.8, 0.85, 0.9, 1, 1, 1], (0.2, 0.55, 0.8)),
    "marble": _ramp({"op": "warp", "params": {"frequency": [3], "amplitude": [0.15], "offset": [2, 5]}, "inputs": [
        {"op": "stripes_sine", "params": {"k": [5, 3], "phase": [0]}}]}, [0.95, 0.93, 0.9, 0.35, 0.3, 0.3]),
    "spots": _ramp({"op": "threshold", "params": {"level": [0.6]}, "inputs": [
        {"op": "value_noise", "params": {"frequency": [10], "offset": [3, 4]}}]}, [0.8, 0.6, 0.3, 0.3, 0.15, 0.05]),
}


#: A generated target counts as recovered at this PSNR within its generator's nodes + 2.
RECOVERED_DB = 35.0


def run_cli(args: list[str]) -> dict:
    cli_main([str(a) for a in args], standalone_mode=False)
    return json.loads((Path(args[args.index("-o") + 1]) / "manifest.json").read_text())


class _ErrorLine(io.TextIOBase):
    """stderr as it is, keeping the CLI's last ``bakery: error:`` line (what a failed
    target's row says)."""

    def __init__(self, stream):
        self.stream, self.line = stream, None

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("bakery: error:"):
                self.line = line
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


class _SecondsLine(logging.Handler):
    """Keeps the stage's last "procedural seconds" record."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.record: dict | None = None

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith(SECONDS_LOG_PREFIX):
            self.record = json.loads(text[len(SECONDS_LOG_PREFIX):])


def bake_target(name: str, kind: str, src: Path, reference_nodes, params: list[str], seed: int, device: str,
                nt_steps: int, size: int) -> dict:
    """One target through `bakery run procedural` (which also trains the byte-matched
    neural_texture baseline); a worker process of its own, so targets can share the GPU.
    A failure comes back as the row's one-line ``error``."""
    out = src.parent
    t0, c0 = time.perf_counter(), time.process_time()
    seconds, stderr = _SecondsLine(), sys.stderr
    logging.getLogger("bakery").addHandler(seconds)  # not the root's: the CLI configures that
    sys.stderr = errors = _ErrorLine(stderr)
    try:
        m = run_cli(["run", "procedural", src, "-o", out / f"{name}_proc", "--seed", seed, "--device", device,
                     *sum((["--param", p] for p in params), []), "--param", f"baseline_steps={nt_steps}",
                     "--param", f"baseline_batch={min(1 << 16, size * size)}"])
    except BaseException as e:  # noqa: BLE001 - one row says what failed; the other targets go on
        text = str(e).strip().splitlines()
        return {"target": name, "kind": kind,
                "error": errors.line or f"{type(e).__name__}: {text[0] if text else ''}",
                "wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - c0, 2)}
    finally:
        sys.stderr = stderr
        logging.getLogger("bakery").removeHandler(seconds)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    met = dict(m["metrics"], psnr_db=float(m["metrics"]["psnr_db"]))  # "inf" when exact
    row = {"target": name, "kind": kind, "psnr_db": met["psnr_db"], "texture_loss": met["texture_loss"],
           "complexity": met["complexity"], "reference_complexity": reference_nodes,
           "instructions": met["instructions"], "program_bytes": met["program_bytes"],
           "png_bytes": met["png_bytes"], "bc7_bytes": met["bc7_bytes"], "wall_s": round(wall, 2),
           "cpu_s": round(cpu, 2),
           "recovered": (reference_nodes is not None and met["psnr_db"] >= RECOVERED_DB
                         and met["complexity"] <= reference_nodes + 2),
           "target_tiles": m["tiling"]["target_tiles"], "program_tiles": m["tiling"]["program_tiles"],
           "period_error": m["tiling"]["period_error"],
           "program": json.loads((out / f"{name}_proc" / "program.json").read_text())["root"],
           "search": m["resolved_params"]["values"], "generations_run": m["search"]["generations_run"],
           "seconds": seconds.record}
    if kind == "stochastic":  # trained by the stage (neural_baseline.py), in wall_s
        row["neural_texture"] = {k: m["neural_texture"][k] for k in
                                 ("octaves", "width", "layers", "weights_bytes", "steps", "psnr_db", "texture_loss")}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="vulkan", choices=("auto", "vulkan", "cuda", "software"))
    ap.add_argument("--small", action="store_true", help="CPU smoke run: 64^2 targets, a short search")
    ap.add_argument("--size", type=int, default=256, help="target size (generated and resampled assets)")
    ap.add_argument("--quality", choices=("preview", "production", "final"), default="production",
                    help="preset tier of the stage's auto params (the search budget)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nt-steps", type=int, default=3000, help="neural_texture baseline steps")
    ap.add_argument("--only", default="", help="comma-separated target names")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="a stage param for every target (repeatable), after the preset's")
    ap.add_argument("--workers", type=int, default=1,
                    help="targets baked at once, each in its own process sharing the device (wall s per "
                         "target then includes the sharing)")
    ap.add_argument("--threads", type=int, default=0,
                    help="numpy/BLAS threads per worker (0: the host's cores over the workers)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "procedural.json")
    a = ap.parse_args()
    threads = a.threads or max(1, (os.cpu_count() or 1) // a.workers)
    for var in THREAD_VARIABLES:  # the spawned workers inherit them
        os.environ[var] = str(threads)
    size = 64 if a.small else a.size
    params = [f"quality={a.quality}"] + (["generations=1", "population=6", "restarts=2", "steps=80",
                                          "refine_steps=100"] if a.small else []) + a.param
    nt_steps = 300 if a.small else a.nt_steps
    dev = open_device(a.device)
    print(f"device: {dev.info.adapter} ({dev.info.backend}, coopvec={dev.info.cooperative_vector}); "
          f"size {size}; stage params {params} (the rest auto); neural_texture steps {nt_steps}; "
          f"{a.workers} worker(s) x {threads} numpy thread(s)", flush=True)

    targets = {}
    for name, obj in GENERATED.items():
        node = dsl.from_json(obj, require_params=True)
        targets[name] = ("generated", render_shader(dev, node, size, size), dsl.complexity(node))
    for path in sorted((ROOT / "assets" / "textures").glob("*.png")):
        img = load_image(path)[:, :, :3]
        if img.shape[0] != size or img.shape[1] != size:
            img = downsample_area(img, size, size)
        targets[path.stem] = ("stochastic", img, None)
    if a.only:
        targets = {k: v for k, v in targets.items() if k in a.only.split(",")}

    rows = {}
    started = time.perf_counter()
    a.out = a.out.resolve()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, \
            ProcessPoolExecutor(a.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        jobs = {}
        for name, (kind, image, reference_nodes) in targets.items():
            src = Path(tmp) / f"{name}.png"
            src.write_bytes(encode_png(image))
            jobs[pool.submit(bake_target, name, kind, src, reference_nodes, params, a.seed, a.device,
                             nt_steps, size)] = name
        for done in as_completed(jobs):
            try:
                row = done.result()
            except BaseException as e:  # noqa: BLE001 - a worker that died: its row says so
                row = {"target": jobs[done], "kind": targets[jobs[done]][0], "error": f"{type(e).__name__}: {e}"}
            rows[jobs[done]] = row
            print(row_line(row), flush=True)
            # After every target: a run cut by its time limit keeps what it finished.
            write(a.out, dev, size, params, nt_steps, a, threads, targets, rows, started, partial=True)
    summary = write(a.out, dev, size, params, nt_steps, a, threads, targets, rows, started, partial=False)
    print(json.dumps(summary))
    print(f"wrote {a.out}")


def row_line(row: dict) -> str:
    """The console line of one finished target."""
    if "error" in row:
        return f"{row['target']:18s} {row['kind']:10s} FAILED: {row['error']}"
    nt = row.get("neural_texture")
    sec = row.get("seconds") or {}
    where = (f"  [search {sec['search_s']:.1f} s: compile {sec['search_compile_s']:.1f} s/{sec['search_kernels']} "
             f"kernels, device wait {sec['search_device_wait_s']:.1f} s, host {sec['search_host_s']:.1f} s; "
             f"outputs {sec['outputs_s']:.1f} s; baseline {sec['baseline_s']:.1f} s: compile "
             f"{sec['baseline_compile_s']:.1f} s, device wait {sec['baseline_device_wait_s']:.1f} s]") if sec else ""
    return (f"{row['target']:18s} {row['kind']:10s} psnr {row['psnr_db']:6.2f} dB "
            f"{'recovered' if row['recovered'] else '         '}  tex {row['texture_loss']:.2e}  "
            f"nodes {row['complexity']:2d} (ref {row['reference_complexity'] or '-'})  "
            f"gens {row['generations_run']}/{row['search']['generations']}  "
            f"tiles {'yes' if row['program_tiles'] else 'no '}  "
            f"~{row['instructions']:4d} instr  {row['program_bytes']:5d} B vs png {row['png_bytes']} / "
            f"bc7 {row['bc7_bytes']}  {row['wall_s']:6.1f} s (cpu {row['cpu_s']:.1f} s)"
            + (f"  | NT {nt['weights_bytes']} B: psnr {nt['psnr_db']:.2f} tex {nt['texture_loss']:.2e}"
               if nt else "") + where)


def summarise(rows: list[dict], workers: int, started: float) -> dict:
    """The suite's figures over the targets finished so far (a failed one counts as not recovered)."""
    done = [r for r in rows if "error" not in r]
    gen = [r for r in rows if r["kind"] == "generated"]
    gen_done = [r for r in gen if "error" not in r]
    summary = {"finished": len(done), "failed": [r["target"] for r in rows if "error" in r]}
    if gen_done:
        mse = np.mean([10 ** (-r["psnr_db"] / 10) for r in gen_done])  # 8-bit MSE back from each PSNR
        summary["generated_psnr_db_from_mean_mse"] = round(float(-10 * np.log10(mse)), 3)
    if gen:
        summary["generated_recovered_35db_within_2_nodes"] = sum(r.get("recovered", False) for r in gen)
        summary["generated_recovered_30db_within_2_nodes"] = sum(
            r["psnr_db"] >= 30 and r["complexity"] <= r["reference_complexity"] + 2 for r in gen_done)
        summary["generated_count"] = len(gen)
    sto = [r for r in done if "neural_texture" in r]
    if sto:
        summary["stochastic_texture_loss_beats_neural_texture"] = sum(
            r["texture_loss"] < r["neural_texture"]["texture_loss"] for r in sto)
        summary["stochastic_count"] = len(sto)
    for r in sto:
        summary[f"{r['target']}_texture_loss"] = r["texture_loss"]
        summary[f"{r['target']}_neural_texture_texture_loss"] = r["neural_texture"]["texture_loss"]
    summary["total_wall_s"] = round(sum(r["wall_s"] for r in done), 1)
    summary["mean_wall_s_per_target"] = round(summary["total_wall_s"] / max(1, len(done)), 1)
    seconds = [r["seconds"] for r in done if r.get("seconds")]
    for key in ("search_s", "search_compile_s", "search_kernels", "search_device_wait_s", "search_host_s",
                "outputs_s", "baseline_s", "baseline_compile_s", "baseline_device_wait_s"):
        if seconds:  # means over the finished targets: where a target's time goes
            summary[f"mean_{key}"] = round(float(np.mean([s[key] for s in seconds])), 2)
    summary["elapsed_s"] = round(time.perf_counter() - started, 1)
    summary["workers"] = workers
    return summary


def write(path: Path, dev, size: int, params: list[str], nt_steps: int, a, threads: int, targets: dict,
          rows: dict, started: float, *, partial: bool) -> dict:
    """Writes the JSON of the targets finished so far (in the suite's order; ``partial``
    until the last); returns its summary."""
    ordered = [rows[name] for name in targets if name in rows]
    summary = summarise(ordered, a.workers, started)
    text = json.dumps({"device": dev.info.to_dict(), "size": size, "stage_params": params,
                       "neural_texture_steps": nt_steps, "seed": a.seed, "workers": a.workers,
                       "threads_per_worker": threads, "targets_planned": list(targets), "partial": partial,
                       "summary": summary,
                       "targets": ordered}, indent=2)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return summary


if __name__ == "__main__":
    main()
