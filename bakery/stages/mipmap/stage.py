"""Stage ``mipmap``: neural mip chains for normal and roughness maps, judged by rendering.

Box-filtered normal mips shade wrongly (a peak beside a trough averages to flat, so
highlights shimmer or vanish at a distance). Here every level L >= 1 is trained so that
shading it with the shared GGX BRDF matches the 2^L x 2^L area average of shading level
0, over light/view pairs drawn afresh each step. The same run measures the trained chain
and the classical filters (box, Toksvig, vMF) on held-out pairs and writes the chains as
DDS and KTX2 with every authored level, plus a rendered preview per level; the Toksvig
chain (the baseline a studio ships) is written beside them as DDS, level by level.
"""

from __future__ import annotations

import numpy as np

from bakery import phases
from bakery.imaging import psnr_from_mse
from bakery.layouts import LAYOUTS
from bakery.materials import NORMAL_CONVENTIONS
from bakery.nn.optimizers import Adam
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.overlap import SideWork
from bakery.progress import TrainingProgress
from bakery.stages.base import Stage, StageResult, register
from bakery.stages.params import AUTO, QUALITY, Param, Presets
from bakery.stages.mipmap.chain import MipChain
from bakery.stages.mipmap.material import load_mip_material
from bakery.stages.mipmap.objective import STARTS, MipFit
from bakery.stages.mipmap.outputs import (encode_baseline_chain, flip_error, level0_blocks, level0_maps, write_chains,
                                          write_encoded, write_previews)
from bakery.verdict import budget_reason, error_verdict, margin_of_error, part

#: What ``auto`` means: at ``production`` a CPU device (lavapipe, 2 cores) finishes a 256^2
#: map in well under a minute; a GPU trains to production quality (bench/mipmap.py).
PRESETS = Presets({
    "cpu": {"preview": {"steps": 100, "pairs": 4, "eval_pairs": 32},
            "production": {"steps": 200, "pairs": 4, "eval_pairs": 64},
            "final": {"steps": 400, "pairs": 8, "eval_pairs": 128}},
    "gpu": {"preview": {"steps": 1000, "pairs": 32, "eval_pairs": 256},
            "production": {"steps": 2000, "pairs": 32, "eval_pairs": 512},
            "final": {"steps": 6000, "pairs": 64, "eval_pairs": 1024}},
})
#: The training budget the manifest's ``mipmap.settings`` repeats.
SETTINGS = ("steps", "pairs", "eval_pairs")
BASELINES = ("box", "toksvig", "vmf")


@register
class Mipmap(Stage):
    type_name = "mipmap"
    typical_seconds = 10.0  # a sample asset's task on an H200 (bench/rebake.py --fresh)
    version = "2"
    description = "train normal/roughness mip chains that shade like the full-resolution map"
    input_roles = ("normal", "roughness", "albedo", "metalness", "ao")
    presets = PRESETS
    baseline = "the better of box and Toksvig mips"
    metric_docs = {
        "trained_rmse_1_4": ("RMSE trained, levels 1\u20134", "RMSE of the rendered trained mips against the "
                             "area-averaged full-resolution render, held-out light/view pairs"),
        "box_rmse_1_4": ("RMSE box, levels 1\u20134", "the same for a 2x2 box-filtered chain"),
        "toksvig_rmse_1_4": ("RMSE Toksvig, levels 1\u20134", "the same for box normals with Toksvig-widened roughness"),
        "vmf_rmse_1_4": ("RMSE vMF, levels 1\u20134", "the same for von Mises-Fisher (vMF) filtered roughness"),
        "reduction_vs_toksvig_1_4": ("RMSE vs Toksvig, levels 1\u20134",
                                     "1 - trained RMSE / Toksvig RMSE: the fraction of Toksvig's error removed"),
        "margin_db": ("vs box/Toksvig (dB)", "20 log10 of the better baseline's RMSE over the trained one"),
    }
    params = (
        Param("levels", int, 0, "levels below 0 to author (0: down to a 4-texel smaller side)", min=0, max=16),
        QUALITY,
        Param("steps", int, AUTO, "training steps", min=1, max=1_000_000),
        Param("pairs", int, AUTO, "light/view pairs per step", min=1, max=1024),
        Param("eval_pairs", int, AUTO, "held-out light/view pairs for the metrics", min=1, max=65536),
        Param("lr", float, 0.01, "Adam learning rate of the normals", min=1e-6, max=1.0),
        Param("roughness_lr", float, 0.01, "Adam learning rate of the roughness", min=1e-6, max=1.0),
        Param("train_albedo", bool, True, "also train the albedo mips (written as albedo.dds/.ktx2)"),
        Param("albedo_lr", float, 0.01, "Adam learning rate of the albedo", min=1e-6, max=1.0),
        Param("init", str, "best", "filter whose roughness training starts from (normals: box); best: per "
              "level the one rendering best on training directions", choices=STARTS),
        Param("light", float, 3.0, "directional light irradiance (renders are Reinhard tone mapped)",
              min=0.01, max=100.0),
        Param("roughness", float, 0.5, "constant roughness when the material has no roughness map", min=0.0, max=1.0),
        Param("albedo", float, 0.5, "constant linear albedo when the material has no albedo map", min=0.0, max=1.0),
        Param("format", str, "bcn", "texture storage: BC5 normal, BC4 roughness, BC7 albedo; or uncompressed",
              choices=("bcn", "uncompressed")),
        Param("layout", str, "separate", "engine texture layout of the chains: one texture per map, or packed as "
              "glTF (occlusionRoughnessMetallic), Unreal (ORM, DirectX normals) or Unity HDRP (MaskMap) import them",
              choices=LAYOUTS),
        Param("normal_convention", str, "layout", "normal maps written OpenGL (gl) or DirectX (dx), or as the "
              "layout's engine reads them", choices=("layout", *NORMAL_CONVENTIONS)),
    )

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        with phases.time("load"):
            material = load_mip_material(dict(inp.files), roughness=params["roughness"], albedo=params["albedo"])
        width, height = material.size
        for note in material.notes:
            ctx.log.info("%s: %s", inp.name, note)
        if not material.roughness_given:
            ctx.log.info("%s: no roughness map; constant roughness %.3g (param roughness)", inp.name,
                         params["roughness"])
        chain = MipChain.for_size(width, height, params["levels"])
        settings = {k: params[k] for k in SETTINGS}
        convention = None if params["normal_convention"] == "layout" else params["normal_convention"]
        with SideWork() as side:   # level 0 and the baseline chain encode beside training (bakery.overlap)
            level0 = {name: side.submit("encoding", level0_blocks, material, name)
                      for name in level0_maps(params["train_albedo"], params["format"], params["layout"], convention)}
            with phases.time("training"):
                device = ctx.device
                fit = MipFit(device, material, chain, pairs=settings["pairs"], light=params["light"], lr=params["lr"],
                             roughness_lr=params["roughness_lr"],
                             albedo_lr=params["albedo_lr"] if params["train_albedo"] else 0.0, init=params["init"],
                             seed=ctx.seed)
                baseline_chain = side.submit("baselines", encode_baseline_chain, material, chain,
                                             fit.baseline("toksvig"), params["format"], "toksvig",
                                             layout=params["layout"], normal_convention=convention)
                config = TrainConfig(steps=settings["steps"], batch=fit.batch, optimizer=Adam(lr=params["lr"]),
                                     schedule="cosine", seed=ctx.seed)
                trainer = Trainer(device, None, fit, config)
                # the loss of the chain so far, read back every few seconds (never per step)
                trainer.train(progress=TrainingProgress(ctx.progress, config.steps, probe=lambda done: {
                    "step": trainer.step, "loss": fit.training_loss(trainer.step, ctx.seed)}))

            with phases.time("metrics"):
                chains = {"trained": fit.trained(), **{k: fit.baseline(k) for k in BASELINES}}
                mse = fit.held_out_mse(chains, settings["eval_pairs"])
                reference, renders = fit.render({"trained": chains["trained"], "box": chains["box"]})
                levels = []
                for i, level in enumerate(range(1, chain.deepest + 1)):
                    row = {"level": level, "width": chain.shape(level)[1], "height": chain.shape(level)[0]}
                    for name in chains:
                        row[f"{name}_rmse"] = round(float(np.sqrt(mse[name][i])), 6)
                        row[f"{name}_psnr_db"] = round(psnr_from_mse(mse[name][i]), 3)
                    for name in ("trained", "box"):
                        row[f"{name}_flip"] = round(flip_error(reference[i], renders[name][i]), 5)
                    levels.append(row)
            summary = {f"{name}_rmse_1_4": round(float(np.sqrt(np.mean(mse[name][:4]))), 6) for name in chains}
            summary["reduction_vs_toksvig_1_4"] = round(1.0 - summary["trained_rmse_1_4"] / summary["toksvig_rmse_1_4"],
                                                        4)

            with phases.time("encoding"):
                write_chains(ctx.out, material, chain, chains["trained"], params["format"],
                             albedo=params["train_albedo"], layout=params["layout"], normal_convention=convention,
                             level0={name: blocks.result() for name, blocks in level0.items()})
                write_encoded(ctx.out, baseline_chain.result())
                write_previews(ctx.out, reference, renders)
        ctx.log.info("%s: %dx%d, levels 1-%d, %d steps x %d pairs; RMSE 1-4 trained %.4f box %.4f toksvig %.4f",
                     inp.name, width, height, chain.deepest, settings["steps"], settings["pairs"],
                     summary["trained_rmse_1_4"], summary["box_rmse_1_4"], summary["toksvig_rmse_1_4"])
        verdict = _against_filters(summary, levels, budget_reason(PRESETS, params))
        return StageResult(
            metrics={"levels": levels, **summary}, verdict=verdict,
            manifest={"mipmap": {
                "source": {"width": width, "height": height, "roughness_map": material.roughness_given},
                "levels": chain.deepest, "settings": settings, "start": fit.start_choice,
                "render": {"light": params["light"], "tonemap": "reinhard x/(1+x)",
                           "space": "linear, tangent frame z up",
                           "held_out": "seed 0x4E1D0, hash streams 2/3 (training draws streams 0/1)"},
                "size_policy": "levels while both sides halve exactly, smaller side >= 4; no padding or cropping"}})

    @classmethod
    def report_section(cls, view) -> str:
        return _report_section(view)


def _against_filters(summary: dict, levels: list[dict], budget: str):
    """The trained chain's RMSE over levels 1-4 against the better of box and Toksvig, per level too."""
    best = min(("box", "toksvig"), key=lambda k: summary[f"{k}_rmse_1_4"])
    parts = []
    for row in levels:
        theirs = min(row["box_rmse"], row["toksvig_rmse"])
        parts.append(part(f"level {row['level']} ({row['width']}x{row['height']}) RMSE", row["trained_rmse"], theirs,
                          margin_of_error(row["trained_rmse"], theirs)))
    return error_verdict(f"{'box' if best == 'box' else 'Toksvig'} mips", summary["trained_rmse_1_4"],
                         summary[f"{best}_rmse_1_4"], metric="RMSE, levels 1\u20134", reason=budget, parts=parts)


def _report_section(view) -> str:
    """RMSE per level of the trained chain against box, Toksvig and vMF, and each level's render."""
    from bakery import reporting

    levels = (view.manifest.get("metrics") or {}).get("levels") or []
    extra = [_levels_plot(levels)] if levels else []
    extra += [reporting.picture(view, name, f"level {name[len('preview_level'):-4]}: reference | trained | box")
              for name in sorted(view.files()) if name.startswith("preview_level") and name.endswith(".png")]
    return reporting.section(view, extra=extra)


def _levels_plot(levels: list[dict]) -> str:
    from bakery.reporting import figure_axes, plot

    fig, ax = figure_axes()
    x = [r["level"] for r in levels]
    for name, style in (("trained", "o-"), ("box", "s--"), ("toksvig", "^--"), ("vmf", "v:")):
        if f"{name}_rmse" in levels[0]:
            ax.semilogy(x, [r[f"{name}_rmse"] for r in levels], style, label=name)
    ax.set_xlabel("mip level")
    ax.set_ylabel("rendered RMSE (held out)")
    ax.set_title("trained mips vs box, Toksvig, vMF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return plot(fig, "RMSE per level")
