"""Stage ``procedural``: find a small procedural program that draws the texture.

A search over program structures (proposers.py, search.py), each candidate's parameters
fitted by Adam on the device (fit.py), scored by image loss + complexity. The bundle holds
the program (JSON), its shader in Slang/HLSL/GLSL, renders at the source size and at 4x
drawn by that shader, a 3x3 repeat of it (does it tile?), the target, a difference image,
the loss/complexity Pareto front, and the program's bytes beside the PNG and BC7 bytes of
the image. A target whose opposite edges meet (search.tiling) gets a program that tiles.
The program is judged against BC7 and a neural texture of its bytes (neural_baseline.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np

from bakery.baselines import bcn
from bakery import phases
from bakery.baselines.resample import downsample_area
from bakery.errors import UsageError
from bakery.formats.images import encode_png, load_image
from bakery.imaging import psnr
from bakery.overlap import SideWork
from bakery.stages.base import Stage, StageResult, register
from bakery.stages.params import AUTO, QUALITY, Param, Presets
from bakery.stages.procedural import codegen, texture_stats
from bakery.stages.procedural.dsl import complexity, instructions, param_count, program_document
from bakery.stages.procedural.fit import FitConfig
from bakery.stages.procedural.neural_baseline import neural_texture_of_equal_bytes
from bakery.stages.procedural.proposers import make_proposers
from bakery.stages.procedural.render import render_shader
from bakery.stages.procedural.search import Search, SearchConfig, tiling
from bakery.verdict import budget_reason, error_verdict, margin_of_error, margin_of_psnr, part, psnr_verdict

MIN_SIZE = 32

#: What ``auto`` means: the search budget per device class and quality tier. CPU production
#: keeps `bakery run procedural` on a 256^2 image under a minute on 2 lavapipe cores (the
#: default pipeline runs it per texture); CPU preview is the one-generation search the
#: default pipeline pinned before presets. On an H200 (bench/procedural.py) the GPU
#: production row is host-bound, not GPU-bound: compiling each generation's fitting modules
#: and solving ramps on the host; the benchmark's per-target seconds say which.
PRESETS = Presets({
    "cpu": {"preview": dict(generations=1, population=6, beam=2, restarts=2, steps=80, batch=1024, fit_size=48,
                            refine_steps=60, baseline_steps=300, baseline_batch=4096),
            "production": dict(generations=2, population=10, beam=3, restarts=2, steps=100, batch=1024, fit_size=48,
                               refine_steps=100, baseline_steps=300, baseline_batch=4096),
            "final": dict(generations=3, population=16, beam=3, restarts=4, steps=180, batch=1024, fit_size=64,
                          refine_steps=400, baseline_steps=1000, baseline_batch=8192)},
    "gpu": {"preview": dict(generations=3, population=16, beam=3, restarts=4, steps=300, batch=4096, fit_size=128,
                            refine_steps=400, baseline_steps=1000, baseline_batch=1 << 16),
            "production": dict(generations=4, population=24, beam=4, restarts=4, steps=300, batch=4096, fit_size=128,
                               refine_steps=800, baseline_steps=3000, baseline_batch=1 << 16),
            "final": dict(generations=6, population=48, beam=6, restarts=8, steps=600, batch=16384, fit_size=256,
                          refine_steps=1500, baseline_steps=8000, baseline_batch=1 << 16)},
})
#: The search budget the manifest's ``search`` repeats.
BUDGET = ("generations", "population", "beam", "restarts", "steps", "batch", "fit_size", "refine_steps")
#: Starts the log line (JSON follows) that splits a task's seconds: the search, the
#: outputs, the neural baseline, each into kernel compiling, waiting for the device and
#: the host's own work (bench/procedural.py reads it back). A log line, never the bundle,
#: whose bytes must not depend on timings.
SECONDS_LOG_PREFIX = "procedural seconds: "


def search_config(params: dict, tile: bool, interpret: bool | None = None) -> SearchConfig:
    """The search a task runs for its resolved ``params`` (bench/procedural_fit.py times
    the same one)."""
    fit = FitConfig(steps=params["steps"], batch=params["batch"], lr=params["lr"],
                    texture_weight=params["texture_weight"], interpret=interpret)
    return SearchConfig(generations=params["generations"], population=params["population"], beam=params["beam"],
                        restarts=params["restarts"], complexity_weight=params["complexity_weight"], fit=fit,
                        refine_steps=params["refine_steps"], tile=tile)


class DeviceSplit:
    """Seconds of a stretch of a task, split by what the device's counters say: compiling
    kernels (bakery.device.KernelCacheStats), waiting for submissions to finish (on a
    GPU: the device at work) and the rest (the host's own work: Python, numpy, recording
    dispatches)."""

    def __init__(self, device):
        self.device = device
        self.record: dict[str, float | int] = {}
        self._mark = self._now()

    def _now(self) -> tuple[float, float, int, float]:
        cache = getattr(self.device, "kernel_cache", None)
        return (time.perf_counter(), getattr(cache, "compile_s", 0.0), getattr(cache, "kernels", 0),
                getattr(self.device, "waited_s", 0.0))

    def lap(self, name: str) -> None:
        """Books the seconds since the last lap (or the start) as ``name``."""
        now = self._now()
        wall, compile_s, kernels, waited = (b - a for a, b in zip(self._mark, now))
        self._mark = now
        self.record.update({f"{name}_s": round(wall, 3), f"{name}_compile_s": round(compile_s, 3),
                            f"{name}_kernels": kernels, f"{name}_device_wait_s": round(waited, 3),
                            f"{name}_host_s": round(max(0.0, wall - compile_s - waited), 3)})


@register
class Procedural(Stage):
    type_name = "procedural"
    typical_seconds = 35.0  # a sample asset's task on an H200 (bench/rebake.py --fresh)
    version = "6"
    description = "find a compact procedural shader program that draws the texture"
    input_roles = ("image",)
    presets = PRESETS
    baseline = "BC7 of the image and a neural texture, each at equal bytes"
    metric_docs = {
        "psnr_db": ("PSNR (dB)", "PSNR of the program's render against the source image"),
        "complexity": ("complexity (nodes)", "nodes of the program's expression tree"),
        "instructions": ("instructions", "shader instructions the program compiles to (estimate)"),
        "texture_loss": ("texture-statistics loss", "distance of the render's texture statistics from the source's"),
        "program_bytes": ("program (bytes)", "compact program.json: what an engine stores"),
        "png_bytes": ("PNG (bytes)", "the source image as PNG"),
        "bc7_bytes": ("BC7 full size (bytes)", "the source image as BC7 at full size"),
        "tiles": ("tiles", "whether the program was made to tile (only whole frequencies, wrapped noise)"),
        "period_error": ("period error", "largest change of the render when shifted by one period (0: seamless)"),
        "bc7_psnr_db": ("BC7 at equal bytes (dB)", "PSNR of the image as BC7 in the program's bytes "
                        "(area-downsampled, upsampled back)"),
        "nt_psnr_db": ("neural texture of equal bytes (dB)", "PSNR of a UV -> RGB MLP (stage neural_texture) "
                       "whose fp16 weights take at most the program's bytes"),
        "nt_texture_loss": ("neural texture's texture-statistics loss", "the same texture loss, of that MLP's render"),
        "nt_weights_bytes": ("neural texture (bytes)", "that MLP's fp16 weights"),
        "margin_db": ("vs the stronger baseline (dB)", "the smaller of: PSNR minus BC7's at equal bytes, and "
                      "10 log10 of the neural texture's texture loss over the program's"),
    }
    params = (
        QUALITY,
        Param("generations", int, AUTO, "search generations", min=1, max=100),
        Param("population", int, AUTO, "new structures fitted per generation", min=1, max=4096),
        Param("beam", int, AUTO, "programs kept and mutated per generation", min=1, max=256),
        Param("restarts", int, AUTO, "random restarts of each structure's fit", min=1, max=64),
        Param("steps", int, AUTO, "Adam steps per fit", min=1, max=100_000),
        Param("batch", int, AUTO, "pixels sampled per restart and step", min=1, max=1 << 22),
        Param("fit_size", int, AUTO, "longest side the search fits at", min=MIN_SIZE, max=4096),
        Param("refine_steps", int, AUTO, "steps of the final fit of the winner (0: none)", min=0, max=100_000),
        Param("lr", float, 0.02, "Adam learning rate (on unit-scaled parameters)", min=1e-6, max=1.0),
        Param("complexity_weight", float, 1e-4, "score = image loss + this x node count", min=0.0, max=1.0),
        Param("texture_weight", float, 5.0, "weight of the texture-statistics term in the image loss",
              min=0.0, max=1e4),
        Param("proposer", str, "builtin", "structure proposer: 'builtin' or 'cmd:COMMAND' (adds a command's programs)"),
        Param("tile", str, "detect", "make the program tile: 'detect' (when the image's opposite edges meet), "
              "'yes', 'no'", choices=("detect", "yes", "no")),
        Param("baseline_steps", int, AUTO, "training steps of the neural-texture baseline of equal bytes",
              min=1, max=1_000_000),
        Param("baseline_batch", int, AUTO, "texels per step of that baseline", min=64, max=1 << 22),
    )

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        path = inp.files["image"]
        image = load_image(path, key="image")
        h, w, c = image.shape
        if c not in (3, 4):
            raise UsageError(f"expected an RGB or RGBA image, got {c} channel(s)", where=str(path), key="image")
        if min(h, w) < MIN_SIZE:
            raise UsageError(f"image is {w}x{h}; the procedural search needs at least {MIN_SIZE}x{MIN_SIZE}",
                             where=str(path), key="image")
        builtin, command = make_proposers(params["proposer"], ctx.log)
        device = ctx.device
        used = {k: params[k] for k in BUDGET}
        rgb = image[:, :, :3]
        scale = min(1.0, used["fit_size"] / max(h, w))
        fw, fh = max(MIN_SIZE, round(w * scale)), max(MIN_SIZE, round(h * scale))
        fit_target = rgb if (fw, fh) == (w, h) else downsample_area(rgb, fw, fh)
        seamless, seam_ratio = tiling(rgb)
        tile = seamless if params["tile"] == "detect" else params["tile"] == "yes"
        config = search_config(params, tile)
        split = DeviceSplit(device)
        search = Search(device, fit_target, config, builtin, command, seed=ctx.seed, log=ctx.log,
                        progress=ctx.progress, detail=rgb)
        with phases.time("training"):
            best = search.run()
        split.lap("search")
        program = best.program

        from bakery.baselines.material import same_bytes_image

        with SideWork() as side:   # the host's encodes beside the renders and the baseline's training
            pareto_png = side.submit("encoding", _pareto_plot, search)
            sources = {lang: codegen.generate(program, lang, (w, h), tile=tile) for lang in codegen.LANGUAGES}
            render = render_shader(device, program, w, h, sources["slang"])
            render4 = render_shader(device, program, 4 * w, 4 * h, sources["slang"])
            repeat3 = render_shader(device, program, 3 * w, 3 * h, sources["slang"], repeat=3.0)
            # Seam check: the program one period on (uv + 1) against itself, both axes.
            shifted = [render_shader(device, program, w, h, sources["slang"], origin=o)
                       for o in ((1.0, 0.0), (0.0, 1.0))]
            seam = max(float(np.abs(s - render).max()) for s in shifted)
            # |render - target| x 4, so small errors are visible.
            pngs = {name: side.submit("encoding", encode_png, picture) for name, picture in (
                ("render.png", render), ("render_4x.png", render4), ("tile3x3.png", repeat3), ("target.png", image),
                ("difference.png", np.clip(4.0 * np.abs(render - rgb), 0.0, 1.0)))}
            score = psnr(render, rgb)
            target_stats = texture_stats.statistics(rgb)   # the program and its neural baseline are scored by them
            tex = texture_stats.texture_loss(render, target_stats)
            doc = program_document(program, tile=tile)
            program_bytes = len(json.dumps(doc, separators=(",", ":")))  # the compact form an engine would store
            front = [dict(cand.summary(), program=program_document(cand.program)["root"]) for cand in search.front()]
            bc7_job = side.submit("baselines", same_bytes_image, rgb, program_bytes)
            split.lap("outputs")
            with phases.time("baselines"):
                nt = neural_texture_of_equal_bytes(device, rgb, program_bytes, steps=params["baseline_steps"],
                                                   batch=params["baseline_batch"], seed=ctx.seed,
                                                   target_stats=target_stats)
                bc7 = bc7_job.result()
            split.lap("baseline")
            sizes = {"program_json": program_bytes, "params_fp32": 4 * param_count(program),
                     "png": len(pngs["target.png"].result()),   # the source as PNG: what a PNG would cost
                     "bc7": bcn.encoded_size("bc7", w, h)}

            out = ctx.out
            out.write_json("program.json", doc, role="program")
            for lang, text in sources.items():
                out.write_bytes(f"procedural.{lang}", text.encode(), role="shader")
            for name, png in pngs.items():
                out.write_bytes(name, png.result(), role="preview")
            out.write_json("pareto.json", {"complexity_weight": config.complexity_weight, "front": front})
            out.write_bytes("pareto.png", pareto_png.result(), role="preview")
        ctx.log.info("%s: %dx%d -> %d nodes, %d params, %d B program vs %d B PNG / %d B BC7; PSNR %.2f dB",
                     inp.name, w, h, best.nodes, param_count(program), program_bytes, sizes["png"], sizes["bc7"],
                     score)
        ctx.log.info("%s%s", SECONDS_LOG_PREFIX, json.dumps(split.record, sort_keys=True))
        out.write_png("neural_texture.png", nt.pop("decoded"), role="preview")
        verdict = _against_baselines(score, tex, bc7, nt, budget_reason(PRESETS, params, key="generations",
                                                                       unit="search generations"))
        metrics = {"psnr_db": round(score, 4), "bc7_psnr_db": round(bc7["psnr"], 4),
                   "nt_psnr_db": nt["psnr_db"], "nt_texture_loss": nt["texture_loss"],
                   "nt_weights_bytes": nt["weights_bytes"], "complexity": complexity(program),
                   "instructions": instructions(program), "texture_loss": round(tex, 8),
                   "program_bytes": program_bytes, "png_bytes": sizes["png"], "bc7_bytes": sizes["bc7"],
                   "tiles": tile, "period_error": round(seam, 6)}
        return StageResult(metrics=metrics, verdict=verdict, manifest={
            "source": {"width": w, "height": h, "channels": c, "alpha_ignored": c == 4},
            "search": {**used, "fit_width": fw, "fit_height": fh, "structures_fitted": len(search.evaluated),
                       "generations_run": search.generations_run,
                       "from_command": sum(1 for c in search.evaluated.values() if c.origin == "cmd")},
            "tiling": {"target_seam_ratio": round(seam_ratio, 4), "target_tiles": seamless, "program_tiles": tile,
                       "period_error": round(seam, 6), "preview": "tile3x3.png"},
            "snapping": search.snaps,
            "neural_texture": {**nt, "preview": "neural_texture.png",
                               "network": "frequency-encoded UV, relu hidden layers, RGB; Adam, cosine schedule"},
            "sizes": sizes})

    @classmethod
    def report_section(cls, view) -> str:
        return _report_section(view)


def _report_section(view) -> str:
    """The render beside its target, the 4x render, and the loss/complexity Pareto front."""
    from bakery import reporting

    files = set(view.files())
    pairs = [("", view.bundle / "target.png", view.bundle / "render.png")] if {"target.png", "render.png"} <= files \
        else []
    extra = reporting.image_rows(view, pairs)
    if "render_4x.png" in files:
        extra.append(reporting.picture(view, "render_4x.png", "render at 4x (a program has no resolution)"))
    if "neural_texture.png" in files:
        extra.append(reporting.picture(view, "neural_texture.png", "baseline: a neural texture of equal bytes"))
    if "pareto.png" in files:
        extra.append(reporting.picture(view, "pareto.png", "loss vs complexity: every structure fitted", css="plot"))
    return reporting.section(view, extra=extra)


def _against_baselines(score: float, tex: float, bc7: dict, nt: dict, budget: str):
    """The program against both baselines a studio could ship in its bytes: BC7 by PSNR,
    the neural texture by the texture loss (appearance, which a program of another noise
    phase can match). The headline is the baseline it does worse against; a loss to the
    other one is named in the reason, so neither is silent."""
    parts = [part(f"BC7 at equal bytes ({bc7['width']}x{bc7['height']}, {bc7['bytes']} B): PSNR (dB)", score,
                  bc7["psnr"], margin_of_psnr(score, bc7["psnr"])),
             dict(part(f"neural texture of equal bytes ({nt['weights_bytes']} B, {nt['steps']} steps): texture loss",
                       tex, nt["texture_loss"], margin_of_error(tex, nt["texture_loss"], power=True)),
                  result=round(tex, 8), baseline=nt["texture_loss"])]  # losses are small: 4 decimals lose them
    bc7_name, nt_name = (p["name"].split(":")[0] for p in parts)
    if parts[0]["margin_db"] <= parts[1]["margin_db"]:
        head = psnr_verdict(bc7_name, score, bc7["psnr"], parts=parts)
        other = parts[1]
    else:
        head = error_verdict(nt_name, tex, nt["texture_loss"], metric="texture loss", power=True, parts=parts)
        other = parts[0]
    reasons = [f"also under the {other['name'].split(':')[0]} ({other['margin_db']:+.2f} dB)"] \
        if other["margin_db"] < 0 else []
    return replace(head, reason="; ".join(reasons + ([budget] if budget else [])))


def _pareto_plot(search) -> bytes:
    """Loss against node count: every fitted structure, the front joined by a line (drawn
    beside the task's thread: matplotlib's object API, no pyplot state)."""
    from matplotlib.figure import Figure

    from bakery.figures import png_bytes

    every = list(search.evaluated.values())
    front = search.front()
    fig = Figure(figsize=(5, 3.5), dpi=100)
    ax = fig.add_subplot()
    ax.scatter([c.nodes for c in every], [c.loss for c in every], s=12, c="0.6", label="fitted structures")
    ax.plot([c.nodes for c in front], [c.loss for c in front], "o-", c="C3", label="Pareto front")
    ax.set_yscale("log")
    ax.set_xlabel("complexity (nodes)")
    ax.set_ylabel("image loss")
    ax.legend(loc="upper right", fontsize=8)
    return png_bytes(fig)
