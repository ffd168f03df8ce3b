"""Stage ``neural_material``: distil a layered material into latent textures + a decoder.

Train an encoder (texel parameters -> latents) and a decoder (latents + directions ->
log(1 + gain BRDF x cos)) end to end against the layered teacher; bake the encoder over every
texel of every mip level of the filtered parameters into a quantised latent texture
array; measure the student against the teacher on a lit plane under held-out directions
(PSNR, FLIP, after quantisation) and, on a hardware device, the time per shading point
of each.
"""

from __future__ import annotations

import time

import numpy as np

from bakery import phases
from bakery.errors import UsageError
from bakery.formats.bundle import encode_texture
from bakery.nn.optimizers import SCHEDULES, Adam
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.overlap import SideWork
from bakery.progress import TrainingProgress
from bakery.shading.layered import QUADRATURES, LayerConstants
from bakery.stages.neural_material.evaluate import FLIP_CROP, display, flip_mean, preview_of_displays, \
    psnr_of_displays
from bakery.stages.neural_material.finetune import LatentFinetune, finetune_latents
from bakery.stages.neural_material.material import mip_chain, material_params
from bakery.stages.neural_material.objective import (DIRECTIONS, LOSSES, NORMAL_EPS, OUTPUT_GAIN,
                                                     MaterialDistillation, held_out_directions, loss_probe, make_stack)
from bakery.stages.neural_material.shader import generate_material_eval, generate_material_eval_webgl
from bakery.stages.base import Stage, StageResult, register
from bakery.stages.params import AUTO, QUALITY, Param, Presets
from bakery.verdict import budget_reason, psnr_verdict
from bakery.materials import ROLES, role_names

#: What ``auto`` means. CPU (lavapipe, 2 shared cores, bricks 256^2, warm caches): training
#: costs ~7 ms/step at hidden 16 and the rest of the bake ~5 s, so production (600 steps)
#: takes ~10 s for 25.6 dB with the frame inputs (world inputs: 22.0 dB, where 60 steps gave
#: 10.9 dB and 200 gave 16.8); final doubles the widths. The short CPU schedules train best
#: at lr 0.02 (+2 dB over 0.01 at 200 steps). GPU: lr 0.01 as bench/neural_material.py
#: measured it; the decoder is 64 x 2 (bricks 256^2 with the frame inputs: 48 x 2 39.8 dB,
#: 64 x 2 40.1, 64 x 3 43.3 but under 5x the teacher's speed; the old 32 x 2 on world inputs
#: 26.1). 64 x 2 rather than 48 x 2 for the margin: at 2048^2, where it was measured, it
#: still runs 9-31x faster than the teacher. The H200 trains batch 2^16 at ~0.25 ms/step,
#: so production (40000 steps) takes ~10 s at 2048^2, final ~20 s.
PRESETS = Presets({
    "cpu": {"preview": {"steps": 200, "batch": 1024, "hidden": 16, "encoder_hidden": 16, "lr": 0.02,
                        "eval_directions": 4},
            "production": {"steps": 600, "batch": 1024, "hidden": 16, "encoder_hidden": 16, "lr": 0.02,
                           "eval_directions": 4},
            "final": {"steps": 2000, "batch": 1024, "hidden": 32, "encoder_hidden": 32, "lr": 0.02,
                      "eval_directions": 8}},
    "gpu": {"preview": {"steps": 10000, "batch": 1 << 16, "hidden": 64, "encoder_hidden": 32, "lr": 0.01,
                        "eval_directions": 8},
            "production": {"steps": 40000, "batch": 1 << 16, "hidden": 64, "encoder_hidden": 32, "lr": 0.01,
                           "eval_directions": 8},
            "final": {"steps": 80000, "batch": 1 << 16, "hidden": 64, "encoder_hidden": 32, "lr": 0.01,
                      "eval_directions": 8}},
})
LATENT_FORMATS = ("unorm8", "fp16")


def _encode_preview(shown_teacher: np.ndarray, shown_student: np.ndarray) -> bytes:
    from bakery.formats.images import encode_png

    return encode_png(preview_of_displays(shown_teacher, shown_student))


def quantize(levels: list[np.ndarray], fmt: str):
    """Stored latents per level and their per-channel (scale, bias): value = bias + scale * stored."""
    n = levels[0].shape[-1]
    if fmt == "fp16":
        scale, bias = np.ones(n), np.zeros(n)
    else:
        bias = np.min([z.reshape(-1, n).min(0) for z in levels], axis=0).astype(np.float64)
        hi = np.max([z.reshape(-1, n).max(0) for z in levels], axis=0).astype(np.float64)
        scale = np.where(hi > bias, hi - bias, 1.0)
    return [store_level(z, fmt, scale, bias) for z in levels], scale, bias


def store_level(z: np.ndarray, fmt: str, scale, bias) -> np.ndarray:
    """One level's stored values in a given per-channel range (8-bit codes / 255, or fp16)."""
    if fmt == "fp16":
        return z.astype(np.float16).astype(np.float32)
    return (np.round(np.clip((z - bias) / scale, 0.0, 1.0) * 255.0) / 255.0).astype(np.float32)


def parse_color(text: str) -> tuple[float, float, float]:
    try:
        rgb = tuple(float(v) for v in text.split(","))
    except ValueError:
        rgb = ()
    if len(rgb) != 3 or not all(0.0 <= v <= 1.0 for v in rgb):
        raise UsageError(f"expected three comma-separated values in [0, 1], got {text!r}", key="params.sheen_color")
    return rgb


@register
class NeuralMaterial(Stage):
    type_name = "neural_material"
    typical_seconds = 40.0  # a sample asset's task on an H200 (bench/rebake.py --fresh)
    version = "2"
    description = "distil a layered material (GGX + clear coat + sheen) into latent textures + a decoder MLP"
    input_roles = tuple(ROLES)
    presets = PRESETS
    baseline = "the uniform material (mean parameters, same teacher)"
    metric_docs = {
        "psnr_db": ("PSNR (dB)", "student against the layered teacher on a lit plane, held-out directions, pooled MSE"),
        "flip": ("FLIP", "mean NVIDIA FLIP of the same renders (lower is better)"),
        "speedup": ("speed-up vs teacher", "teacher time / decoder time per shading point (hardware devices only)"),
        "uniform_psnr_db": ("uniform material (dB)", "the set's mean parameters shaded by the same teacher, "
                            "against the textured teacher"),
        "margin_db": ("vs uniform material (dB)", "PSNR minus the uniform material's: what the texture adds"),
    }
    params = (
        Param("latents", int, 8, "latent channels (4 per texture-array layer)", choices=(4, 8, 12, 16)),
        QUALITY,
        Param("hidden", int, AUTO, "decoder hidden width", min=8, max=128),
        Param("layers", int, 2, "decoder hidden layers", min=1, max=4),
        Param("encoder_hidden", int, AUTO, "encoder hidden width (2 layers; training only)", min=8, max=128),
        Param("steps", int, AUTO, "training steps", min=1, max=1_000_000),
        Param("batch", int, AUTO, "shading samples per step", min=1, max=1 << 22),
        Param("lr", float, AUTO, "Adam learning rate of both networks", min=1e-6, max=1.0),
        Param("schedule", str, "cosine", "learning-rate schedule", choices=SCHEDULES),
        Param("loss", str, "log", "training loss: L2 on the displayed lit plane (the quality metric's "
              "transform) or on the decoder's log(1 + gain f) output", choices=LOSSES),
        Param("directions", str, "frame", "decoder direction inputs: wi, wo, half vector h (world), or also "
              "dot(n, wi), dot(n, wo), dot(n, h) for a shading normal n learned in latents 0-2 (frame: "
              "+2.7 dB for a 48 x 3 decoder at 256^2 on the H200, bench/RESULTS.md)",
              choices=DIRECTIONS),
        Param("latent_format", str, "unorm8", "stored latents: 8-bit with per-channel scale/bias, or fp16",
              choices=LATENT_FORMATS),
        Param("finetune_steps", int, 0, "after the bake, steps that fit the level-0 latent texels directly "
              "through the frozen decoder, as stored (0: off)", min=0, max=1_000_000),
        Param("finetune_lr", float, 2e-3, "Adam learning rate of the latent fine-tuning", min=1e-6, max=1.0),
        Param("coat_weight", float, 1.0, "clear-coat layer weight", min=0.0, max=1.0),
        Param("coat_roughness", float, 0.3, "clear-coat perceptual roughness", min=0.02, max=1.0),
        Param("coat_ior", float, 1.5, "clear-coat index of refraction", min=1.0, max=3.0),
        Param("coat_quadrature", int, 16, "internal directions of the base <-> coat inter-reflection (teacher cost)",
              choices=QUADRATURES),
        Param("sheen_weight", float, 0.5, "sheen layer weight", min=0.0, max=1.0),
        Param("sheen_color", str, "0.5,0.5,0.5", "sheen colour, linear r,g,b in [0, 1]"),
        Param("sheen_roughness", float, 0.5, "sheen roughness (clamped to >= 0.3)", min=0.0, max=1.0),
        Param("roughness", float, 0.5, "roughness where the folder has no roughness map", min=0.0, max=1.0),
        Param("metalness", float, 0.0, "metalness where the folder has no metalness map", min=0.0, max=1.0),
        Param("eval_directions", int, AUTO, "held-out light/view pairs of the quality measurement", min=2, max=64),
        Param("time_points", int, 0, "shading points per timing dispatch on a hardware device; 0: no timing "
              "(a measured time differs run to run, and a bundle's bytes must not)", min=0, max=1 << 24),
    )

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        layers = LayerConstants(params["coat_weight"], params["coat_roughness"], params["coat_ior"],
                                params["sheen_weight"], parse_color(params["sheen_color"]), params["sheen_roughness"],
                                params["coat_quadrature"])
        with phases.time("load"):
            base, notes = material_params(dict(inp.files), roughness=params["roughness"], metalness=params["metalness"])
        for note in notes:
            ctx.log.info("%s: %s", inp.name, note)
        h, w, _ = base.shape
        dclass = params.device_class
        steps, batch = params["steps"], params["batch"]
        n = params["latents"]
        directions_mode = params["directions"]
        stack = make_stack(n, params["hidden"], params["layers"], params["encoder_hidden"], directions_mode)
        with phases.time("training"):
            obj = MaterialDistillation(ctx.device, base, n, layers, params["loss"], directions_mode)
            cfg = TrainConfig(steps=steps, batch=batch, optimizer=Adam(lr=params["lr"]), schedule=params["schedule"],
                              seed=ctx.seed)
            trainer = Trainer(ctx.device, stack, obj, cfg)
            started = time.perf_counter()
            probe = loss_probe(base, layers, stack, params["loss"])  # read back every few seconds, never per step
            trainer.train(progress=TrainingProgress(_with_train_seconds(ctx.progress, started), steps,
                                                    probe=lambda done: {"step": trainer.step,
                                                                        "loss": probe(trainer.params())}))
            # the wall time goes to the log and the progress callback, never the manifest: a
            # bundle stays byte-identical for the same seed (portable backend)
            ctx.log.info("%s: trained %d steps x batch %d in %.2f s (%s, %s)", inp.name, steps, batch,
                         time.perf_counter() - started, dclass, params["quality"])

        nets = stack.unstack(trainer.params())  # the trained networks, downloaded once

        with phases.time("training"):   # the encoder baked into latents, the fine-tuning
            # Bake: the encoder over every level of the filtered parameters, then quantise.
            chain = mip_chain(base)
            raw = []
            for level in chain:
                obj.bind_material(level)
                raw.append(obj.encode(trainer))
            stored, scale, bias = quantize(raw, params["latent_format"])
            if params["finetune_steps"]:
                # the level-0 texels fitted directly through the decoder, in the bake's range
                tune = LatentFinetune(ctx.device, base, raw[0], scale, bias, layers, loss=params["loss"],
                                      directions=directions_mode, latent_format=params["latent_format"],
                                      lr=params["finetune_lr"])
                started = time.perf_counter()
                tuned, _ = finetune_latents(ctx.device, stack["Network"], nets["Network"], tune,
                                            steps=params["finetune_steps"], batch=batch, seed=ctx.seed,
                                            progress=TrainingProgress(_with_train_seconds(ctx.progress, started,
                                                                                          "finetune_s"),
                                                                      params["finetune_steps"]))
                stored[0] = store_level(tuned, params["latent_format"], scale, bias)
                ctx.log.info("%s: fine-tuned the level-0 latents %d steps in %.2f s", inp.name,
                             params["finetune_steps"], time.perf_counter() - started)
            decoded = [bias.astype(np.float32) + scale.astype(np.float32) * s for s in stored]

        fmt = "rgba8_unorm" if params["latent_format"] == "unorm8" else "rgba16f"
        mips = [np.ascontiguousarray(s.reshape(s.shape[0], s.shape[1], n // 4, 4).transpose(2, 0, 1, 3))
                for s in stored]
        with SideWork() as side:   # the zstd KTX2 and the previews encode beside the renders (bakery.overlap)
            ktx2 = side.submit("encoding", encode_texture, "latents.ktx2", fmt, mips, array=True,
                               supercompression="zstd")   # seconds of zstd at level 19 for 2K latents
            # Quality after quantisation, level 0.
            with phases.time("metrics"):
                obj.bind_material(base)
                obj.bind_latents(decoded[0])
                directions = held_out_directions(params["eval_directions"])
                teachers = [obj.render(trainer, "teacher", wi, wo) for wi, wo in directions]
                students = [obj.render(trainer, "student", wi, wo) for wi, wo in directions]
                # each render through the display transform once: scored pooled, per direction,
                # against the uniform material and shown in the previews
                shown_teachers, shown_students = [display(t) for t in teachers], [display(s) for s in students]
                quality_psnr = psnr_of_displays(shown_teachers, shown_students)
                quality_flip = flip_mean(teachers, students)   # on the raw renders' crops, as it always has
                del teachers, students   # only their displays are needed from here
            # the baseline: the uniform material (the set's mean parameters) shaded by the same teacher
            with phases.time("baselines"):
                obj.bind_material(uniform_material(base))
                shown_uniform = [display(obj.render(trainer, "teacher", wi, wo)) for wi, wo in directions]
                obj.bind_material(base)
                uniform_psnr = psnr_of_displays(shown_teachers, shown_uniform)
            shown = {f"preview_{k}.png": (shown_teachers[j], shown_students[j])   # random, in between, near-mirror
                     for k, j in ((k, k * (len(directions) - 1) // 2) for k in range(min(3, len(directions))))}
            # the baseline beside them: teacher | uniform material | difference, the first direction
            shown["uniform_preview.png"] = (shown_teachers[0], shown_uniform[0])
            previews = {name: side.submit("encoding", _encode_preview, *pair) for name, pair in shown.items()}

            timing = None
            if dclass == "gpu" and params["time_points"]:
                timing = obj.speed_against_teacher(trainer, params["time_points"])

            with phases.time("encoding"):
                decoder = stack["Network"]
                out = ctx.out
                out.write_weights("weights.bin", decoder, nets["Network"])
                # The encoder runs only while baking; it ships for re-baking and inspection.
                out.write_weights("encoder.bin", stack["Encoder"], nets["Encoder"], dtype="float32", network="encoder")
                out.write_texture("latents.dds", fmt, mips, array=True, role="latents")
                out.write_texture("latents.ktx2", encoded=ktx2.result(), role="latents")
                out.write_decoder_artifacts(decoder, params=nets["Network"], shaders=("slang", "hlsl", "webgl"))
                for lang, ext in (("slang", "slang"), ("hlsl", "hlsl")):
                    text = generate_material_eval(decoder, n, scale, bias, lang, directions=directions_mode)
                    out.write_bytes(f"material_eval.{ext}", text.encode(), role="shader")
                out.write_bytes("material_eval.webgl.glsl", generate_material_eval_webgl(
                    decoder, n, scale, bias, directions=directions_mode, prefix=f"{out.symbol_prefix}_material").encode(),
                    role="shader")
                for name, png in previews.items():
                    out.write_bytes(name, png.result(), role="preview")

        metrics = {"psnr_db": round(quality_psnr, 3), "flip": round(quality_flip, 5),
                   "speedup": None if timing is None or timing["speedup"] is None else round(timing["speedup"], 3),
                   "uniform_psnr_db": round(uniform_psnr, 3)}
        if metrics["speedup"] is None:
            del metrics["speedup"]  # measured on a hardware device only
        verdict = psnr_verdict("the uniform material (mean parameters, same teacher)", quality_psnr, uniform_psnr,
                               reason=budget_reason(PRESETS, params))
        extra = {"material": {"roles": sorted(role_names(inp.files)), "width": w, "height": h},
                 "layers": layers.to_dict(),
                 "latents": {"channels": n, "format": params["latent_format"], "texture_format": fmt,
                             "mips": len(stored), "scale": [float(v) for v in scale],
                             "bias": [float(v) for v in bias], "decode": "bias + scale * stored",
                             "layout": "feature f in array layer f // 4, component f % 4"},
                 "decoder_output": (f"log(1 + {OUTPUT_GAIN:g} BRDF x cos); eval returns "
                                    f"max(exp(y) - 1, 0) / {OUTPUT_GAIN:g}"),
                 "directions": directions_mode,
                 "direction_encoding": _direction_encoding(directions_mode),
                 "training": {"device_class": dclass, "quality": params["quality"], "steps": steps, "batch": batch,
                              "hidden": params["hidden"], "encoder_hidden": params["encoder_hidden"],
                              "lr": params["lr"], "schedule": params["schedule"], "loss": params["loss"],
                              "finetune_steps": params["finetune_steps"], "finetune_lr": params["finetune_lr"]},
                 "evaluation": {"directions": directions.round(6).tolist(), "display": "Reinhard(pi * f), sRGB",
                                "psnr": "pooled MSE over all renders",
                                "psnr_db_per_direction": [round(psnr_of_displays([t], [s]), 3)
                                                          for t, s in zip(shown_teachers, shown_students)],
                                "flip": f"mean of per-render LDR FLIP, centre crop <= {FLIP_CROP}^2"},
                 "timing": timing}
        ctx.log.info("%s: %dx%d, %d latents, PSNR %.2f dB (uniform material %.2f), FLIP %.4f, speedup %s", inp.name,
                     w, h, n, quality_psnr, uniform_psnr, quality_flip, metrics.get("speedup"))
        return StageResult(metrics=metrics, verdict=verdict, manifest={
            "neural_material": extra})

    @classmethod
    def report_section(cls, view) -> str:
        return _report_section(view)


def _report_section(view) -> str:
    """Teacher | student | difference per held-out direction, the uniform material the same
    way, and the student's PSNR against the uniform material's."""
    from bakery import reporting

    names = sorted(n for n in view.files() if n.startswith("preview_") and n.endswith(".png"))
    extra = [reporting.picture(view, n, f"teacher | student | difference \u00d74 (direction {n[8:-4]})") for n in names]
    if "uniform_preview.png" in view.files():
        extra.append(reporting.picture(view, "uniform_preview.png",
                                       "teacher | uniform material | difference \u00d74 (direction 0)"))
    m = view.manifest.get("metrics") or {}
    if "psnr_db" in m and "uniform_psnr_db" in m:
        extra.append(reporting.bar_plot("student vs the uniform material", "PSNR against the teacher (dB)",
                                        {"student": m["psnr_db"], "uniform material": m["uniform_psnr_db"]},
                                        highlight="student"))
    return reporting.section(view, extra=extra)


def uniform_material(params: np.ndarray) -> np.ndarray:
    """The material a studio ships without textures: every texel the set's mean parameters
    (linear albedo, roughness, metalness averaged; the mean normal renormalised)."""
    mean = params.reshape(-1, params.shape[-1]).astype(np.float64).mean(0)
    n = mean[3:6]
    mean[3:6] = n / max(np.linalg.norm(n), 1e-8)
    return np.ascontiguousarray(np.broadcast_to(mean.astype(np.float32), params.shape))


def _direction_encoding(directions: str) -> list[str]:
    """What the decoder's inputs after the latents are, in order (manifest)."""
    names = ["wi.xyz", "wo.xyz", "normalize(wi + wo).xyz"]
    if directions == "frame":
        n = f"n = v / sqrt(dot(v, v) + {NORMAL_EPS:g}), v = 2 * latents[0:3] - 1"
        names += [f"dot(n, wi), dot(n, wo), dot(n, normalize(wi + wo)); {n}"]
    return names


def _with_train_seconds(report, started: float, key: str = "train_s"):
    """``report`` with ``key`` (wall seconds since ``started``) on the last step's call:
    the training time for progress displays and bench/neural_material.py."""
    def progress(done=None, total=None, **info):
        if total is not None and done is not None and done >= total:
            info[key] = round(time.perf_counter() - started, 3)
        report(done, total=total, **info)
    return progress
