"""Benchmark: the fit stage recovering example (b)'s whole mask at N^2 (default 512^2,
3000 steps), with Adam, AMSGrad and AdamW.

Per optimiser, through the real stage (`run_task`): the mask PSNR against the truth, the
final loss and the stage's wall time (compile, training, outputs). For Adam, the training
loop alone: wall time per step beside the GPU time per step (timestamp queries around
each command buffer of the same run), and their difference, the per-step overhead. The baseline row
is the noise the mask starts from. Prints a table and writes bench/out/fit.json.

    python3 bench/fit.py --device vulkan              # the H200 run
    python3 bench/fit.py --device software --small    # a quick check on the CPU (64^2, 200 steps)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.formats.images import load_image  # noqa: E402
from bakery.imaging import psnr  # noqa: E402
from bakery.nn.trainer import TrainConfig, Trainer  # noqa: E402
from bakery.pipeline.task import run_task, settings_for  # noqa: E402
from bakery.stages import StageInput, get_stage  # noqa: E402
from bakery.stages.fit.objective import ShaderFit, initial_values  # noqa: E402
from bakery.stages.fit.signature import reflect  # noqa: E402
from bakery.stages.fit.spec import load_spec  # noqa: E402
from bakery.stages.fit.stage import make_optimizer  # noqa: E402
from scripts.make_fit_assets import render_spec, save_png, truth_mask  # noqa: E402

OPTIMIZERS = ("adam", "amsgrad", "adamw")


def make_case(folder: Path, size: int, steps: int, lr: float, device_kind: str) -> tuple[Path, np.ndarray]:
    """Example (b) at ``size``^2: shader, truth mask, rendered reference and a spec."""
    shutil.copy(ROOT / "assets" / "fit" / "rainbow.slang", folder / "rainbow.slang")
    mask = np.round(truth_mask(size) * 255.0) / 255.0
    save_png(folder / "mask_truth.png", mask)
    save_png(folder / "reference.png", np.zeros((size, size, 3), np.float32))
    spec = folder / "rainbow.toml"
    spec.write_text(f'shader = "rainbow.slang"\nfunction = "rainbow_warp"\nreference = "reference.png"\n'
                    f'[args]\nuv = "uv"\nmask = {{ param = [{size}, {size}, 1], init = "noise", seed = 7, '
                    f'clamp = [0.0, 1.0], lr = {lr} }}\n'
                    f'[fit]\nsteps = {steps}\nloss = "l2"\noptimizer = "adam"\nschedule = "cosine"\n')
    save_png(folder / "reference.png", render_spec(spec, {"mask": mask}, device_kind))
    return spec, mask.astype(np.float32)


def stage_run(spec: Path, optimizer: str, dev, out: Path) -> dict:
    text = spec.read_text().replace('optimizer = "adam"', f'optimizer = "{optimizer}"')
    variant = spec.with_name(f"rainbow_{optimizer}.toml")
    variant.write_text(text)
    t0 = time.perf_counter()
    stage, inputs = get_stage("fit"), [StageInput(variant.stem, {"fit": variant})]
    m = run_task(stage, inputs, settings_for(stage, {}, inputs, device_class=dev.device_class), seed=0,
                 device_provider=lambda: dev, out_dir=out, log=logging.getLogger("bench"))
    wall = time.perf_counter() - t0
    return {"optimizer": optimizer, "wall_s": wall, "final_loss": m["metrics"]["final_loss"],
            "out": out}


def loop_timing(spec_path: Path, dev) -> dict:
    """Wall and GPU time per step of the training loop alone (compiled beforehand).

    ``Trainer.train`` as a stage runs it gives the wall time; a second run records the
    same command buffers (``steps_per_submit`` steps each) with a timestamp at the start
    and end of each, so the GPU's busy time and the wall time come from the same run.
    """
    spec = load_spec(spec_path)
    sig = reflect(dev, spec)
    reference = load_image(spec.reference)

    def trainer():
        obj = ShaderFit(dev, spec, sig, reference, {}, {}, seed=0)
        return Trainer(dev, None, obj, TrainConfig(steps=spec.steps, batch=obj.pixels,
                                                   optimizer=make_optimizer(spec), schedule=spec.schedule))

    trainer().train()  # warm-up run (the first run in a process is slower by up to 2x)
    tr = trainer()
    t0 = time.perf_counter()
    tr.train()
    train_wall = (time.perf_counter() - t0) / spec.steps
    result = {"train_wall_per_step_us": train_wall * 1e6}
    try:
        import slangpy as spy

        tr = trainer()
        per = tr.config.steps_per_submit
        buffers = (spec.steps + per - 1) // per
        pool = dev.spy.create_query_pool(type=spy.QueryType.timestamp, count=2 * buffers)
        t0 = time.perf_counter()
        for k in range(buffers):
            n = min(per, spec.steps - k * per)

            def record(enc, k=k, n=n):
                enc.write_timestamp(pool, 2 * k)
                for _ in range(n):
                    tr._record_step(enc)  # the steps exactly as Trainer.train records them
                enc.write_timestamp(pool, 2 * k + 1)

            dev.submit(record)
        dev.wait()
        wall = (time.perf_counter() - t0) / spec.steps
        t = np.array(pool.get_timestamp_results(0, 2 * buffers)).reshape(buffers, 2)
        gpu = float((t[:, 1] - t[:, 0]).sum()) / spec.steps
        result.update(wall_per_step_us=wall * 1e6, gpu_per_step_us=gpu * 1e6,
                      overhead_per_step_us=(wall - gpu) * 1e6)
    except Exception as e:  # noqa: BLE001 - some drivers have no timestamp queries
        print(f"(no GPU timestamps on this device: {type(e).__name__}: {e})")
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="vulkan")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--small", action="store_true", help="64^2, 200 steps (a CPU check)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "fit.json"))
    a = p.parse_args()
    if a.small:
        a.size, a.steps = 64, 200
    dev = open_device(a.device)
    print(f"device: {dev.info.adapter} ({dev.info.backend}, {'coopvec' if dev.coopvec else 'portable'})")
    print(f"settings: example (b) rainbow mask at {a.size}x{a.size}, {a.steps} steps, lr {a.lr}, cosine, "
          f"L2, full batch ({a.size * a.size} pixels per step), noise init seed 7")
    rows = []
    out = Path(a.out).resolve()

    def save(**more) -> None:
        """After every row (a run cut at its time limit keeps the finished ones), and at the end."""
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(json.dumps({"device": dev.info.to_dict(), "settings": {"size": a.size, "steps": a.steps,
                                                                               "lr": a.lr},
                                   "rows": rows, **more}, indent=2))
        os.replace(tmp, out)

    def row_line(r: dict) -> str:
        loss = f"{r['final_loss']:11.3g}" if "final_loss" in r else f"{'--':>11}"
        wall = f"{r['wall_s']:12.2f}" if "wall_s" in r else f"{'--':>12}"
        return f"{r['optimizer']:24} {r['mask_psnr_db']:12.2f} {loss} {wall}"

    print(f"\n{'optimizer':24} {'mask PSNR dB':>12} {'final loss':>11} {'stage wall s':>12}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        spec, truth = make_case(tmp, a.size, a.steps, a.lr, a.device)
        b = load_spec(spec).args["mask"]
        noise = initial_values(b, 1, b.seed).reshape(truth.shape)
        rows.append({"optimizer": "noise init (baseline)", "mask_psnr_db": psnr(noise, truth)})
        print(row_line(rows[-1]), flush=True)
        for opt in OPTIMIZERS:
            r = stage_run(spec, opt, dev, tmp / f"out_{opt}")
            r["mask_psnr_db"] = psnr(load_image(r.pop("out") / "mask.png"), truth)
            rows.append(r)
            save()
            print(row_line(r), flush=True)
        timing = loop_timing(spec, dev)
    line = f"\nAdam training loop: Trainer.train {timing['train_wall_per_step_us']:.1f} us/step wall"
    if "gpu_per_step_us" in timing:
        line += (f"; timed run {timing['wall_per_step_us']:.1f} us/step wall = {timing['gpu_per_step_us']:.1f} GPU"
                 f" + {timing['overhead_per_step_us']:.1f} overhead (recording, submission, idle GPU)")
    print(line)
    save(loop=timing)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
