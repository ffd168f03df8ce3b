"""Benchmark: neural materials - held-out rendered quality, training time and the
decoder's speed per shading point against the layered teacher, in one run.

Materials: the three sample materials and three more made the same way (the generator
of scripts/make_assets.py with other seeds), at --size^2, each baked by the real
``neural_material`` stage. Per material: held-out PSNR / FLIP of the lit plane (student
after latent quantisation vs teacher; a constant-per-render predictor as the trivial
baseline), training seconds, and (hardware devices) ns per shading point of teacher
and decoder over --points points and their ratio. Targets (issue 13): PSNR >= 35 dB,
speedup >= 5, training < 120 s. Prints a table and writes bench/out/neural_material.json.

    python3 bench/neural_material.py --device vulkan [--quality final]   # H200: 2048^2, CoopVec
    python3 bench/neural_material.py --device software --small           # CPU smoke run
    python3 bench/neural_material.py --device vulkan --directions world  # without the learned-normal inputs

Training params left at ``auto`` (the default) take the stage's preset for the device
class and --quality; the values used are in each row's ``resolved``. The training time
comes from the stage's progress callback (``train_s``), not the manifest, which holds no
wall-clock values.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.pipeline.task import run_task, settings_for  # noqa: E402
from bakery.stages import StageInput, get_stage  # noqa: E402

TARGETS = {"psnr_db": 35.0, "speedup": 5.0, "train_s": 120.0}


def _generator():
    spec = importlib.util.spec_from_file_location("make_assets", ROOT / "scripts" / "make_assets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_materials(folder: Path, size: int, variants: bool) -> list[Path]:
    """Sample materials (the generator's own seeds) and, with ``variants``, the same
    recipes with other seeds."""
    gen = _generator()
    recipes = (("bricks", gen.bricks), ("tiles", gen.tiles), ("cobblestones", gen.cobblestones))
    seeds = [("", 0)] + ([("_b", 100)] if variants else [])
    out = []
    for suffix, offset in seeds:
        for i, (name, make) in enumerate(recipes):
            target = folder / f"{name}{suffix}"
            gen.write_material(target, *make(np.random.default_rng(gen.SEED + i + offset), size))
            out.append(target)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="vulkan")
    p.add_argument("--small", action="store_true", help="tiny CPU run: 32^2, 3 materials, few steps")
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--quality", choices=("preview", "production", "final"), default="production",
                   help="preset tier of the stage's auto params")
    p.add_argument("--steps", default="auto", help="training steps (auto: the stage's preset for the device and "
                   "--quality)")
    p.add_argument("--batch", default="auto", help="shading samples per step (auto: the stage's preset for the "
                   "device and --quality)")
    p.add_argument("--latents", type=int, default=8)
    p.add_argument("--hidden", default="auto", help="decoder hidden width (auto: the preset)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", default="auto", help="Adam learning rate (auto: the preset)")
    p.add_argument("--schedule", default="cosine", choices=("constant", "cosine", "one_cycle"))
    p.add_argument("--loss", default="log", choices=("display", "log"))
    p.add_argument("--directions", default="frame", choices=("world", "frame"),
                   help="decoder direction inputs: world (wi, wo, h) or frame (also cosines with a learned normal)")
    p.add_argument("--latent-format", default="unorm8", choices=("unorm8", "fp16"))
    p.add_argument("--encoder-hidden", default="auto", help="encoder hidden width (auto: the preset)")
    p.add_argument("--points", type=int, default=1 << 22, help="shading points per timing dispatch")
    p.add_argument("--count", type=int, default=6, help="materials to bake (3 samples, then 3 variants)")
    p.add_argument("--first", type=int, default=0, help="skip this many of them (e.g. 3: the variants only)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "neural_material.json"))
    a = p.parse_args()
    if a.small:
        a.size, a.steps, a.batch, a.hidden, a.points = 32, 150, 1024, 16, 1 << 12
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dev = open_device(a.device)
    info = dev.info
    print(f"device: {info.adapter} (software={info.software}, coopvec={dev.coopvec})")
    params = {"quality": a.quality, "steps": a.steps, "batch": a.batch, "latents": a.latents, "hidden": a.hidden,
              "layers": a.layers, "lr": a.lr, "schedule": a.schedule, "time_points": a.points, "loss": a.loss,
              "latent_format": a.latent_format, "encoder_hidden": a.encoder_hidden, "directions": a.directions}
    print(f"settings: size {a.size}^2, {json.dumps(params)}")
    stage = get_stage("neural_material")
    rows = []
    out = Path(a.out).resolve()

    def save(**final) -> None:
        """After every material (a run cut at its time limit keeps the finished ones), and at the end."""
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(json.dumps({"device": info.adapter, "software": info.software, "coopvec": dev.coopvec,
                                   "size": a.size, "params": params, "rows": rows, **final}, indent=2))
        os.replace(tmp, out)

    def fmt(v, f):
        return format("--", f">{f.split('.')[0]}") if v is None else format(v, f)

    def line(r: dict) -> str:
        return (f"{r['material']:16} {r['psnr_db']:8.2f} {r['uniform_psnr_db']:10.2f} {r['flip']:7.4f} "
                f"{fmt(r['teacher_ns'], '10.4f')} {fmt(r['decoder_ns'], '10.4f')} {fmt(r['speedup'], '8.2f')} "
                f"{r['train_s']:8.1f} {r['wall_s']:7.1f}")

    header = (f"{'material':16} {'PSNR dB':>8} {'uniform dB':>10} {'FLIP':>7} {'teacher ns':>10} {'decoder ns':>10} "
              f"{'speedup':>8} {'train s':>8} {'wall s':>7}")
    print(header, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for folder in make_materials(Path(tmp) / "materials", a.size, variants=not a.small)[a.first:a.first + a.count]:
            files = {q.stem: q for q in sorted(folder.glob("*.png"))}
            last = {}

            def progress(done=None, total=None, **info):
                last.update(info)

            t0 = time.perf_counter()
            inputs = [StageInput(folder.name, files)]
            settings = settings_for(stage, params, inputs, device_class=dev.device_class)
            m = run_task(stage, inputs, settings, seed=0, device_provider=lambda: dev,
                         out_dir=Path(tmp) / "out" / folder.name, log=logging.getLogger("bench"), progress=progress)
            wall = time.perf_counter() - t0
            nm, met = m["neural_material"], m["metrics"]
            timing = nm["timing"] or {}
            rows.append({"material": folder.name, "psnr_db": met["psnr_db"],
                         "uniform_psnr_db": met["uniform_psnr_db"], "flip": met["flip"], "speedup": met.get("speedup"),
                         "teacher_ns": timing.get("teacher_ns_per_point"),
                         "decoder_ns": timing.get("decoder_ns_per_point"),
                         "train_s": last["train_s"], "steps": nm["training"]["steps"],
                         "directions": nm["directions"],
                         "batch": nm["training"]["batch"], "timing_method": timing.get("method"),
                         "resolved": m["resolved_params"],
                         "wall_s": round(wall, 2),
                         "psnr_db_per_direction": nm["evaluation"]["psnr_db_per_direction"]})
            save()
            print(line(rows[-1]), flush=True)

    used = rows[0]["resolved"]
    print(f"\ntraining ({used['device_class']}, {used['quality']}; auto: {', '.join(used['auto']) or 'none'}): "
          f"{rows[0]['steps']} steps x batch {rows[0]['batch']}, hidden {used['values']['hidden']}/"
          f"{used['values']['encoder_hidden']}, lr {used['values']['lr']}; timing: {rows[0]['timing_method']}")
    print(header)
    for r in rows:
        print(line(r))
    # set PSNR from the mean MSE, never averaged dB
    mse = np.mean([10 ** (-r["psnr_db"] / 10) for r in rows])
    summary = {"psnr_db": float(-10 * np.log10(mse)), "flip": float(np.mean([r["flip"] for r in rows])),
               "speedup_min": min((r["speedup"] for r in rows if r["speedup"] is not None), default=None),
               "train_s_max": max(r["train_s"] for r in rows)}
    checks = {"psnr_db": summary["psnr_db"] >= TARGETS["psnr_db"],
              "speedup": None if summary["speedup_min"] is None else summary["speedup_min"] >= TARGETS["speedup"],
              "train_s": summary["train_s_max"] < TARGETS["train_s"]}
    print(f"\nset: PSNR {summary['psnr_db']:.2f} dB (target >= 35), FLIP {summary['flip']:.4f}, min speedup "
          f"{fmt(summary['speedup_min'], '.2f')} (target >= 5), max training {summary['train_s_max']:.1f} s "
          f"(target < 120); pass: {checks}")
    save(summary=summary, targets=TARGETS, **{"pass": checks})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
