"""Benchmark: neural texture compression against BCn, and its training speed.

Quality: each sample material (6 textures), plus --extra-seeds materials made the same
way (scripts/make_assets.py --seed), at 2, 4, 8 and 16 GPU-resident bpp (latents with
their mips + decoder, the bytes an engine keeps in GPU memory) through the real ``ntc``
stage; per texture the neural PSNR next to BCn at equal bytes (BC7/BC5/BC4 at the
resolution whose blocks equal the neural set's bytes, upsampled bilinearly) and the set
PSNR next to full-resolution BCn (32 bpp) with the gap. Prints a markdown table (also
bench/out/ntc.md).
Speed (--big N): an N^2 6-texture set made by scripts/make_assets.py; ms/step, and the
best and the final set PSNR with the training time to each, and to a preview within
1.5 dB of the final (PSNR checked every --check steps; the first 20 steps, which compile
the kernels, are trained but not timed), and the GPU time per phase of a step (training
kernel, split-K sum, optimizers) from timestamps over 20 more steps; once per
--big-scatter x --big-samples x --big-updates variant and seed 0..--big-repeat - 1 (e.g.
`--big-scatter thread staged none --big-samples texels lines patches --big-updates dense
lazy touched`: where the latent gradients' cost goes, what coherent samples save, what a
lazy latent Adam saves, and what it saves reading only the cells the training kernel
marked).
Set figures are PSNRs of the mean MSE over the set's textures (bakery.formats.images.
set_psnr), never means of dB values: a constant map decodes to ~110 dB or inf and would
swing a dB mean by 10+ dB. (The stage's own manifest still reports ``mean_psnr_db``, a
mean of the finite dB values; this benchmark recomputes the set figure from MSE.)
Prints the device, the settings, tables, and writes bench/out/ntc.json (after each finished
part: a run cut short keeps what it finished; each speed variant's line prints as it ends).

    python3 bench/ntc.py --device vulkan --big 2048 --big-steps 6000   # the H200 run
    python3 bench/ntc.py --device software --small                    # a minutes-scale CPU check
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.nn import parameters  # noqa: E402
from bakery.imaging import psnr, set_psnr  # noqa: E402
from bakery.formats.publish import write_atomic  # noqa: E402
from bakery.stages.ntc.objective import LATENT_SCATTER  # noqa: E402
from bakery.nn.optimizers import Adam  # noqa: E402
from bakery.nn.trainer import TrainConfig, Trainer  # noqa: E402
from bakery.materials import load_material, renormalize_normals  # noqa: E402
from bakery.stages.ntc.rate import choose  # noqa: E402
from bakery.pipeline.task import run_task, settings_for  # noqa: E402
from bakery.stages import StageInput, get_stage  # noqa: E402
from bakery.stages.ntc import weighting as margin_weighting  # noqa: E402
from bakery.stages.ntc.stage import PRESETS  # noqa: E402
from bakery.stages.params import preset_class  # noqa: E402
from bench.clocks import decode_on_gpu, keep_busy  # noqa: E402
from bench.experiments import ntc_scatter  # noqa: E402
from bench.experiments import reduction as experimental_reduction  # noqa: E402
from bench.step_profile import profile_steps  # noqa: E402


def material_files(folder: Path) -> dict:
    return {p.stem: p for p in sorted(folder.glob("*.png"))}


def _db(v) -> str:
    return f"{float(v):7.2f}" if v is not None else "     --"


def material_folders(a, tmp: Path) -> list[Path]:
    """The sample materials (cropped to --size if given) and, per extra seed, the three
    generator materials made the same way with that seed."""
    folders = sorted(Path(a.materials).iterdir())
    if a.size:
        folders = [_crop(f, tmp / "crop" / f.name, a.size) for f in folders]
    for seed in a.extra_seeds:
        out = tmp / f"seed{seed}"
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_assets.py"), "--out", str(out), "--size",
                        str(a.size or 256), "--seed", str(seed)], check=True, capture_output=True)
        for f in sorted((out / "materials").iterdir()):
            named = out / f"{f.name}_s{seed}"
            f.rename(named)
            folders.append(named)
    return folders


def _crop(src: Path, dst: Path, size: int) -> Path:
    from bakery.formats.images import encode_png, load_image

    dst.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.glob("*.png")):
        (dst / p.name).write_bytes(encode_png(load_image(p)[:size, :size]))
    return dst


def quality(a, dev, finished=None) -> list[dict]:
    """Every material at every rate; ``finished(rows)`` after each material's rows."""
    stage = get_stage("ntc")
    rows = []
    log = logging.getLogger("bench")
    with tempfile.TemporaryDirectory() as mats:
        folders = material_folders(a, Path(mats))
        for folder in folders:
            rows += _quality_rows(a, dev, stage, log, folder)
            if finished is not None:
                finished(rows)
    return rows


def _quality_rows(a, dev, stage, log, folder) -> list[dict]:
    rows = []
    params = {"quality": a.quality, "steps": a.steps, "batch": a.batch, **dict(kv.split("=", 1) for kv in a.param)}
    for bpp in a.bpp:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            inputs = [StageInput(folder.name, material_files(folder))]
            settings = settings_for(stage, {**params, "bpp": bpp}, inputs, device_class=dev.device_class)
            m = run_task(stage, inputs, settings, seed=0,
                         device_provider=lambda: dev, out_dir=Path(tmp) / "b", log=log)
            wall = time.perf_counter() - t0
        base = m["ntc"]["baseline"]
        same = {r: t["same_bytes_psnr"] for r, t in base["textures"].items()}
        full = {r: t["psnr"] for r, t in base["textures"].items()}
        row = {"material": folder.name, "bpp_requested": bpp, "bpp": m["metrics"]["bpp"],
               "psnr": m["metrics"]["psnr_db"], "mean_psnr": set_psnr(m["metrics"]["psnr_db"].values()),
               "bcn_same_bytes": same, "bcn_same_bytes_mean": set_psnr(same.values()),
               "bcn_full": full, "bcn_full_mean": set_psnr(full.values()), "wall_s": round(wall, 2),
               "rate": {k: m["ntc"]["rate"][k] for k in ("bpp", "requested_bpp", "gpu_resident_bytes")},
               "mip_psnr": m["ntc"]["mip_psnr_db"], "training": m["ntc"]["training"],
               "latents": {k: m["ntc"]["latents"][k] for k in ("grid_width", "grid_height", "features", "mode")}}
        row["constant"] = [r for r, v in row["bcn_full"].items() if float(v) > 50.0]  # "inf" is a string in JSON
        row["margin_db"] = {r: round(float(row["psnr"][r]) - float(row["bcn_same_bytes"][r]), 3)
                            for r in row["psnr"] if r not in row["constant"]}
        row["gap_to_full_bcn_db"] = round(row["bcn_full_mean"] - row["mean_psnr"], 3)
        rows.append(row)
        print(f"{folder.name:13} {bpp:5.1f} bpp ({row['bpp']:.2f}): neural set {row['mean_psnr']:.2f} dB | "
              f"BCn same bytes {_db(row['bcn_same_bytes_mean'])} | BCn 32 bpp {_db(row['bcn_full_mean'])} | "
              f"{wall:.1f} s", flush=True)
        for r in row["psnr"]:
            print(f"    {r:10} neural {_db(row['psnr'][r])}  bcn@same {_db(row['bcn_same_bytes'][r])}  "
                  f"bcn@full {_db(row['bcn_full'][r])}", flush=True)
    return rows


#: --big-samples: LatentTextureFit's sample layout per name (texels: independent texels)
SAMPLE_LAYOUTS = {"texels": {}, "lines": {"line_texels": 32}, "lines16": {"line_texels": 16},
                  "lines8": {"line_texels": 8}, "patches": {"patches": True}}


def speed(a, dev):
    """The N^2 set trained once per requested variant (latent scatter x sample layout x
    latent updates) and seed, the set made once; yields each run's row as it finishes."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_assets.py"), "--out", tmp, "--size",
                        str(a.big)], check=True, capture_output=True)
        folder = sorted((Path(tmp) / "materials").iterdir())[0]
        mat = load_material(material_files(folder))
    for scatter in a.big_scatter:
        for samples in a.big_samples:
            for updates in a.big_updates:
                for seed in range(a.big_repeat):
                    yield speed_run(a, dev, mat, scatter, samples, updates, seed)


#: What tells one speed variant from another in a row (and in _variant's words).
VARIANT_KEYS = ("latent_scatter", "line_texels", "patches", "latent_updates")


def speed_summary(rows: list[dict]) -> list[dict]:
    """Per variant over its seeds: the median and range of ms/step, and the final set PSNR
    from the mean MSE over the runs (with the runs' range)."""
    out = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in VARIANT_KEYS), []).append(r)
    return [{**dict(zip(VARIANT_KEYS, key)), "runs": len(rs),
             "ms_per_step_median": round(statistics.median(r["ms_per_step"] for r in rs), 4),
             "ms_per_step_range": [min(r["ms_per_step"] for r in rs), max(r["ms_per_step"] for r in rs)],
             "final_set_psnr": round(set_psnr([r["final_set_psnr"] for r in rs]), 3),
             "final_set_psnr_range": [min(r["final_set_psnr"] for r in rs), max(r["final_set_psnr"] for r in rs)]}
            for key, rs in out.items()]


def speed_run(a, dev, mat, scatter: str, samples: str, updates: str, seed: int) -> dict:
    lazy = updates != "dense"
    h, w, c = mat.image.shape
    # the code width the stage's preset gives this device (2-bit on a GPU, 4-bit on a CPU)
    bits = PRESETS.table[preset_class(dev.device_class)][a.quality]["latent_bits"]
    point = choose(w, h, c, a.big_bpp, hidden=64, layers=2, bits=bits, pe_octaves=3)
    t0 = time.perf_counter()
    obj = ntc_scatter.latent_texture_fit(dev, mat.image, point.grid, normal_channel=mat.normal_channel, seed=seed,
                                         latent_scatter=None if scatter == "auto" else scatter, lazy_latents=lazy,
                                         touched_cells=updates == "touched", **SAMPLE_LAYOUTS[samples])
    scatter = ntc_scatter.NONE if scatter == ntc_scatter.NONE else obj.latent_scatter
    print(f"  speed set: {_variant(scatter, obj.line_texels, obj.patches, updates)}, seed {seed}",
          flush=True)
    tr = Trainer(dev, point.network, obj, TrainConfig(steps=a.big_steps, batch=a.big_batch, optimizer=Adam(lr=5e-3),
                                                      schedule="cosine", steps_per_submit=50, seed=seed))
    experimental_reduction.apply(tr)  # the lab's changes to a built trainer, where --reduction names any
    tr.train(20)  # compiles the pipelines; these steps count in the schedule, not in the times
    curve = []
    train_s = 0.0
    while tr.step < a.big_steps:
        if dev.coopvec:
            keep_busy(decode_on_gpu(tr, obj))  # the clock up again after the host's PSNR check (bench/clocks.py)
        t1 = time.perf_counter()
        tr.train(a.check)
        train_s += time.perf_counter() - t1
        dec = renormalize_normals(obj.decode(tr), mat.normal_channel)
        curve.append({"step": tr.step, "train_s": round(train_s, 3),
                      "set_psnr": round(set_psnr([psnr(dec[..., s:s + n], mat.image[..., s:s + n])
                                                  for s, n in mat.slices]), 3)})
        print(f"  big set step {tr.step:6d}: {train_s:7.2f} s training, set PSNR (mean MSE) "
              f"{curve[-1]['set_psnr']:.2f} dB", flush=True)
    loss_scale = tr.store.loss_scale()
    phases = profile_steps(dev, tr)  # a few more steps, after the curve
    print(f"  GPU us per step by phase: {phases}", flush=True)
    final = curve[-1]
    best = max(curve, key=lambda p: p["set_psnr"])
    preview = next(p for p in curve if p["set_psnr"] >= final["set_psnr"] - 1.5)
    ms = train_s / (a.big_steps - 20) * 1e3
    return {"size": a.big, "bpp": point.bpp, "latent_bits": bits, "features": point.grid.features,
            "latent_scatter": scatter, "line_texels": obj.line_texels, "patches": obj.patches,
            "lazy_latents": lazy, "latent_updates": updates, "seed": seed,
            "steps": a.big_steps,
            "batch": a.big_batch, "ms_per_step": round(ms, 4),
            "final_set_psnr": final["set_psnr"], "time_to_final_s": final["train_s"],
            "best_set_psnr": best["set_psnr"], "best_step": best["step"], "time_to_best_s": best["train_s"],
            "preview_within_1p5db_s": preview["train_s"], "preview_step": preview["step"], "curve": curve,
            "loss_scale_end": loss_scale, "gpu_us_per_phase": phases,
            "wall_s": round(time.perf_counter() - t0, 2)}


def _variant(scatter: str, line_texels: int, patches: bool, updates: str) -> str:
    samples = f"lines of {line_texels}" if line_texels else "patches" if patches else "texel samples"
    return (f"{scatter} latent scatter, {samples}, "
            f"{'lazy over marked cells' if updates == 'touched' else updates} latent updates")


def markdown(rows: list[dict]) -> str:
    """Per material and rate: set PSNR (from MSE) against BCn at equal bytes and at 32 bpp,
    the gap to full-rate BCn, and each non-constant texture's margin over BCn at equal bytes."""
    lines = ["| material | bpp asked | bpp (GPU) | neural set dB | BCn same bytes set dB | BCn 32 bpp set dB | gap to 32 bpp | "
             "worst texture margin vs BCn same bytes | margins (dB) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        margins = r["margin_db"]
        worst = min(margins.items(), key=lambda kv: kv[1]) if margins else ("-", float("nan"))
        lines.append(f"| {r['material']} | {r['bpp_requested']:g} | {r['bpp']:.3f} | {r['mean_psnr']:.2f} | "
                     f"{r['bcn_same_bytes_mean']:.2f} | {r['bcn_full_mean']:.2f} | {r['gap_to_full_bcn_db']:.2f} | "
                     f"{worst[0]} {worst[1]:+.2f} | " + ", ".join(f"{k} {v:+.2f}" for k, v in sorted(margins.items())) + " |")
    by_rate = {}
    for r in rows:
        by_rate.setdefault(r["bpp_requested"], []).append(r)
    lines += ["", "| bpp asked | materials | set dB (mean MSE over materials) | BCn same bytes | BCn 32 bpp | "
              "textures >= 2 dB over BCn same bytes |", "|---|---|---|---|---|---|"]
    for bpp, rs in sorted(by_rate.items()):
        n_ok = sum(v >= 2.0 for r in rs for v in r["margin_db"].values())
        n_all = sum(len(r["margin_db"]) for r in rs)
        lines.append(f"| {bpp:g} | {len(rs)} | {set_psnr(r['mean_psnr'] for r in rs):.2f} | "
                     f"{set_psnr(r['bcn_same_bytes_mean'] for r in rs):.2f} | {set_psnr(r['bcn_full_mean'] for r in rs):.2f} | "
                     f"{n_ok}/{n_all} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--materials", default=str(ROOT / "assets" / "materials"))
    p.add_argument("--bpp", type=float, nargs="*", default=[2, 4, 8, 16])
    p.add_argument("--steps", default="auto", help="ntc steps (auto: the stage's preset for the device and --quality)")
    p.add_argument("--batch", default="auto", help="ntc batch (auto: the stage's preset for the device and --quality)")
    p.add_argument("--quality", choices=("preview", "production", "final"), default="production",
                   help="preset tier of the stage's auto params")
    p.add_argument("--big", type=int, default=0, help="also time an N^2 set (0: skip)")
    p.add_argument("--big-bpp", type=float, default=8.0)
    p.add_argument("--big-steps", type=int, default=20000)
    p.add_argument("--big-batch", type=int, default=1 << 18)
    p.add_argument("--big-scatter", nargs="+", choices=("auto", *LATENT_SCATTER, ntc_scatter.NONE), default=["auto"],
                   help="latent-gradient scatters of the speed set, one run each (auto: on a GPU shuffle with "
                        "patches, else staged; per thread on the CPU; none: bench/experiments/ntc_scatter.py, the "
                        "latents do not train)")
    p.add_argument("--big-samples", nargs="+", choices=tuple(SAMPLE_LAYOUTS), default=["patches"],
                   help="speed set training samples, one run each: independent texels, lines of N texels "
                        "(lines: 32), or a patch of texels per workgroup (the default: the ntc stage's choice on "
                        "a GPU from 2048^2 up)")
    p.add_argument("--big-updates", nargs="+", choices=("dense", "lazy", "touched"), default=["touched"],
                   help="speed set latent Adam, one run each: every latent each step, only those with a "
                        "gradient reading every gradient (lazy), or only those with a gradient reading the "
                        "gradients of the cells the training kernel marked (touched: the ntc stage's lazy "
                        "updates, the default, with patches)")
    p.add_argument("--big-repeat", type=int, default=1,
                   help="runs of each speed variant, seeds 0..N-1 (N > 1: a summary per variant, the median "
                        "ms/step and the final set PSNR from the mean MSE over the runs)")
    p.add_argument("--check", type=int, default=1000)
    p.add_argument("--reduction", help="CoopVec gradient reduction: JSON, or bench/grad_reduction.py's output file")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "ntc.json"))
    p.add_argument("--extra-seeds", type=int, nargs="*", default=[1],
                   help="also materials from scripts/make_assets.py --seed S (3 per seed)")
    p.add_argument("--size", type=int, default=0, help="crop/make materials at this size (0: as stored, 256)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="extra ntc stage param")
    p.add_argument("--margin-rounds", type=int, help="weighting=margin: pauses (ntc/weighting.py MARGIN_ROUNDS)")
    p.add_argument("--margin-gain", type=float, help="weighting=margin: dB of weight per dB under the target (MARGIN_GAIN)")
    p.add_argument("--margin-cushion", type=float, help="weighting=margin: dB the pauses aim above margin_db (MARGIN_CUSHION_DB)")
    p.add_argument("--small", action="store_true",
                   help="CPU check: 64^2 crops, one extra seed, 4 and 16 bpp, 100 steps, tiny decoder, --big 128")
    a = p.parse_args()
    if a.big and a.big_steps <= 20:
        p.error("--big-steps must pass the 20 untimed steps that compile the kernels")
    if a.big_repeat < 1:
        p.error("--big-repeat must be at least 1")
    if a.small:
        a.size, a.extra_seeds, a.steps, a.batch = 64, a.extra_seeds[:1], 100, 4096
        a.bpp = [4, 16] if a.bpp else []
        a.param += ["hidden=16", "layers=1"]
        a.big, a.big_steps, a.check, a.big_bpp, a.big_batch = 128, 100, 40, 16.0, 4096
    if a.reduction:
        print(f"gradient reduction: {experimental_reduction.use_json(a.reduction)}")
    if a.margin_rounds is not None:
        margin_weighting.MARGIN_ROUNDS = a.margin_rounds
    if a.margin_gain is not None:
        margin_weighting.MARGIN_GAIN = a.margin_gain
    if a.margin_cushion is not None:
        margin_weighting.MARGIN_CUSHION_DB = a.margin_cushion
    dev = open_device(a.device)
    print(f"device: {dev.info.adapter} ({dev.info.backend}, cooperative vectors {dev.coopvec})", flush=True)
    print(f"settings: quality bpp {a.bpp} ({a.quality} tier: {a.steps} steps, batch {a.batch}); "
          f"speed set {a.big or 'skipped'}"
          + (f"^2 at {a.big_bpp} bpp, {a.big_steps} steps, batch {a.big_batch}, cosine lr 5e-3, PSNR every "
             f"{a.check} steps" if a.big else ""), flush=True)
    reduction = ("default (bakery/nn/parameters.py default_reduction, by the decoder's widths)"
                 if experimental_reduction.chosen() is None else experimental_reduction.chosen().to_dict())
    result = {"benchmark": "ntc", "device": dev.info.to_dict(), "tier": a.quality, "steps": a.steps,
              "batch": a.batch, "reduction": reduction if dev.coopvec else None}
    print(f"materials: {a.materials} cropped to {a.size or 'stored size'}, extra seeds {a.extra_seeds}; "
          f"stage params {a.param}", flush=True)
    result["settings"] = {"bpp": a.bpp, "extra_seeds": a.extra_seeds, "size": a.size, "params": a.param,
                          "margin_rounds": margin_weighting.MARGIN_ROUNDS, "margin_gain": margin_weighting.MARGIN_GAIN,
                          "margin_cushion_db": margin_weighting.MARGIN_CUSHION_DB}
    def save() -> None:
        """The JSON so far: a run cut by its caller's time limit keeps every finished part."""
        write_atomic(Path(a.out).resolve(), json.dumps(result, indent=2).encode())

    if a.bpp:
        # after each material: a run cut at its time limit keeps the finished ones
        result["quality"] = quality(a, dev, finished=lambda rows: (result.update(quality=rows), save()))
        table = markdown(result["quality"])
        print(table, flush=True)
        md = Path(a.out).with_suffix(".md")
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(table)
        save()
    if a.big:
        result["speed"] = []
        for s in speed(a, dev):
            result["speed"].append(s)
            if a.big_repeat > 1:  # after every run: a run cut short keeps the finished runs' summary
                result["speed_summary"] = speed_summary(result["speed"])
            save()
            print(f"{a.big}^2 set at {s['bpp']:.2f} bpp ({s['latent_bits']}-bit codes, {s['features']} features, "
                  f"{_variant(*(s[k] for k in VARIANT_KEYS))}): "
                  f"{s['ms_per_step']:.3f} ms/step, GPU us {s['gpu_us_per_phase']}; set PSNR (mean MSE) final "
                  f"{s['final_set_psnr']:.2f} dB after {s['time_to_final_s']:.1f} s, best {s['best_set_psnr']:.2f} dB "
                  f"(step {s['best_step']}) after {s['time_to_best_s']:.1f} s, within 1.5 dB of final after "
                  f"{s['preview_within_1p5db_s']:.1f} s", flush=True)
        for v in result.get("speed_summary", []):
            print(f"{_variant(*(v[k] for k in VARIANT_KEYS))} over "
                  f"{v['runs']} seeds: {v['ms_per_step_median']:.4f} ms/step median "
                  f"({v['ms_per_step_range'][0]:.4f}-{v['ms_per_step_range'][1]:.4f}), final set PSNR (mean MSE "
                  f"over runs) {v['final_set_psnr']:.2f} dB ({v['final_set_psnr_range'][0]:.2f}-"
                  f"{v['final_set_psnr_range'][1]:.2f})", flush=True)
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
