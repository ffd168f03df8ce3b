"""Stage ``ntc``: neural texture compression of a whole material texture set.

All textures of one material (up to 16 channels) become a pyramid of low-bit latent
grids plus one small decoder MLP; any texel of any channel at any mip level decodes on
its own. Latents ship packed (``latents.bin``, codes in 32-bit words) or as a BC4 texture
array with mips (``latents.dds``, sampled with hardware filtering). Rates count the bytes
an engine keeps in GPU memory. The same run encodes the set with the classical formats a
studio ships today (BC7 colour, BC5 normal, BC4 single channels) and reports both, also at
equal bytes.
"""

from __future__ import annotations

import numpy as np

from bakery import phases
from bakery.errors import UsageError
from bakery.formats.images import encode_png, image_size
from bakery.imaging import set_psnr
from bakery.materials import ROLES, binding_role, load_material
from bakery.overlap import SideWork
from bakery.stages.base import Stage, StageResult, register
from bakery.stages.ntc import bc4, packing
from bakery.stages.ntc.manifest import ntc_section
from bakery.stages.ntc.rate import choose, ladder
from bakery.stages.ntc.shader import COMPUTE_LANGUAGES, EXTENSIONS, LANGUAGES, generate_ntc_decoder, \
    generate_ntc_mip_decoder
from bakery.stages.ntc.texture_set import LATENT_BITS, LATENT_MODES
from bakery.stages.ntc.training import SetTraining
from bakery.stages.params import AUTO, QUALITY, Param, Presets
from bakery.verdict import budget_reason, margin_of_psnr, part, psnr_verdict

#: What ``auto`` means. At ``production`` the CPU (lavapipe) row keeps a 256^2 set under a
#: minute (32 s warm, 42 s with cold Slang and Mesa caches, on a shared 2-core machine), the
#: GPU row aims at production quality on a 2048^2 set in < 2 minutes (`bench/ntc.py --big
#: 2048` measures it). ``bc_refresh`` (BC mode) is the steps between BC4 re-encodes. 2-bit
#: latent codes beat 4-bit on every material at 8 bpp on the H200 (+0.90 dB on the set); on
#: the CPU's few steps they leave a flat map near 35 dB where 4-bit codes decode it near-exact.
#: On a GPU, sets of COHERENT_FROM texels and more train on patches with lazy latent
#: updates (_fit_to_set). Margin weighting (ntc/weighting.py) on a GPU: all 30 sample
#: textures >= 2 dB over BCn at equal bytes at 8 bpp against 26 with plain MSE, for 0.96 dB
#: of set PSNR. The CPU presets keep plain MSE: at their 300 steps margin weighting measured
#: 21.65 against 22.85 dB on the same six sets, with no texture more over the bar.
_CPU = {"patches": False, "latent_updates": "dense", "weighting": "uniform"}
_GPU = {"batch": 1 << 18, "hidden": 64, "bc_refresh": 100, "latent_bits": 2, "patches": True, "latent_updates": "lazy",
        "weighting": "margin"}
COHERENT_FROM = 2048 * 2048


def _fit_to_set(preset: dict, texels: int) -> dict:
    """Patch samples with lazy latent updates only where the set is large: on the H200's
    2048^2 set at 8 bpp they reach the default's quality at 6000 steps (28.65 against 28.66
    dB) at 0.59 against 0.85-1.02 ms/step, while on the 256^2 sample sets the two together
    cost 0.13 dB (bench/RESULTS.md, ntc). Below COHERENT_FROM: independent
    texels, dense updates."""
    if texels < COHERENT_FROM:
        return dict(preset, patches=False, latent_updates="dense")
    return preset


def sample_layout(params: dict) -> dict:
    """Lines asked for take the place of automatic patches (both asked for is refused
    before the run: NeuralTextureCompression.check_params)."""
    return dict(params, patches=False) if params["line_texels"] else params


def training_settings(params: dict) -> dict:
    """Resolved params as training reads them: BC4 holds 4-bit codes whatever the preset
    says, and the sample layout asked for."""
    if params["latents"] == "bc":
        params = dict(params, latent_bits=4)
    return sample_layout(params)


PRESETS = Presets({
    "cpu": {"preview": {"steps": 150, "batch": 1 << 12, "hidden": 32, "bc_refresh": 25, "latent_bits": 4, **_CPU},
            "production": {"steps": 300, "batch": 1 << 12, "hidden": 32, "bc_refresh": 25, "latent_bits": 4, **_CPU},
            "final": {"steps": 1000, "batch": 1 << 12, "hidden": 32, "bc_refresh": 50, "latent_bits": 4, **_CPU}},
    "gpu": {"preview": {"steps": 3000, **_GPU},
            "production": {"steps": 6000, **_GPU},
            "final": {"steps": 20000, **_GPU}},
}, fit=_fit_to_set)


def _weight_params():
    return tuple(Param(f"weight_{r}", float, 1.0, f"loss weight of the {r} channels", min=0.0, max=100.0)
                 for r in ROLES)


@register
class NeuralTextureCompression(Stage):
    type_name = "ntc"
    typical_seconds = 25.0  # a sample asset's task on an H200 (bench/rebake.py --fresh)
    version = "4"
    description = "compress a material's texture set (with mips) into latent textures + a decoder MLP"
    input_roles = tuple(ROLES)
    presets = PRESETS
    baseline = "BCn at equal bytes"
    metric_docs = {
        "bpp": ("bits per texel", "GPU-resident bits per texel of mip 0: latents with their mips plus the decoder"),
        "psnr_db.*": ("PSNR {} (dB)", "PSNR of the decoded {} texture against its source"),
        "mean_psnr_db": ("mean PSNR (dB)", "PSNR of the mean MSE over the set's textures"),
        "set_psnr_db": ("set PSNR (dB)", "PSNR of the mean MSE over the set's textures (what the margin compares)"),
        "margin_db": ("vs BCn at equal bytes (dB)", "set PSNR minus that of BC7/BC5/BC4 downscaled to the same bytes"),
    }
    params = (
        Param("bpp", float, 8.0, "GPU-resident bits per texel of mip 0 for the whole set (latents with their "
              "mips + decoder)", min=0.5, max=20.0),
        Param("target_psnr", float, 0.0, "if > 0: the cheapest rate whose mean PSNR reaches this (overrides bpp)",
              min=0.0, max=80.0),
        QUALITY,
        Param("steps", int, AUTO, "training steps per trained rate", min=1, max=1_000_000),
        Param("batch", int, AUTO, "texels per step", min=1, max=1 << 22),
        Param("hidden", int, AUTO, "decoder hidden width", min=8, max=128),
        Param("layers", int, 2, "decoder hidden layers", min=1, max=4),
        Param("latents", str, "packed", "latent storage: packed codes in a buffer, or BC4 textures", choices=LATENT_MODES),
        Param("latent_bits", int, AUTO, "bits per latent code (packed mode; BC4 is 4)", choices=LATENT_BITS),
        Param("features", int, 0, "latent features per level (0: choose by rate)", choices=(0, 4, 8, 12, 16)),
        Param("mips", bool, True, "train and ship the whole mip chain"),
        Param("pe_octaves", int, 3, "texel position-encoding octaves", min=1, max=6),
        Param("lr", float, 5e-3, "decoder learning rate", min=1e-6, max=1.0),
        Param("latent_lr", float, 2e-2, "latent learning rate", min=1e-6, max=1.0),
        Param("latent_updates", str, AUTO, "Adam over every latent each step (dense), or only over those the "
              "step's samples touched (lazy: sparse updates, less memory traffic)", choices=("dense", "lazy")),
        Param("line_texels", int, 0, "train on lines of this many consecutive texels of one mip (RTXNTC's "
              "coherent batches: fewer distinct latents per step); 0: independent texels", choices=(0, 8, 16, 32)),
        Param("patches", bool, AUTO, "train on patches of texels of one mip (16 x 8 at 128 threads), one per "
              "workgroup: neighbouring threads read and add the same latents (GPU speed on large sets)"),
        Param("noise_fraction", float, 0.0, "packed mode: fraction of steps trained with uniform latent noise "
              "instead of rounding; the latents freeze for the last FREEZE_FRACTION", min=0.0, max=1.0),
        Param("bc_refresh", int, AUTO, "BC mode: steps between BC4 re-encodes of the latents", min=1, max=100_000),
        Param("weighting", str, AUTO, "per-texture loss weights: uniform (plain MSE); from the MSE of BCn at "
              "equal bytes (bcn); or margin: raised during training for every texture under margin_db over BCn "
              "at equal bytes (ntc/weighting.py; margin and bcn encode BCn even with baseline = false)",
              choices=("uniform", "bcn", "margin")),
        Param("margin_db", float, 2.0, "weighting=margin: the dB over BCn at equal bytes every texture is steered "
              "towards", min=-20.0, max=30.0),
        Param("baseline", bool, True, "also encode BC7/BC5/BC4 and report them"),
        Param("transcode", str, "none", "also write BCn DDS files (full mip chains) decoded from the network",
              choices=("none", "bcn")),
        *_weight_params(),
    )

    @classmethod
    def check_params(cls, params, *, where=None, key_prefix="params") -> None:
        if params["patches"] is True and params["line_texels"]:
            raise UsageError("patches and line_texels are two sample layouts: set one of them", where=where,
                             key=f"{key_prefix}.patches")

    @classmethod
    def resolve_auto(cls, params, *, device_class, files) -> dict:
        """The presets sized by the set's texels (from the first texture's header), then
        what the latent mode and sample layout imply (training_settings)."""
        first = next((k for k in sorted(files) if binding_role(k) in ROLES), None)
        if first is None:
            raise UsageError("no textures in material", key="inputs")
        w, h = image_size(files[first], key=first)
        return training_settings(PRESETS.resolve(params, device_class=device_class, size=h * w))

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        with phases.time("load"):
            material = load_material(dict(inp.files))
        for note in material.notes:
            ctx.log.info("%s: %s", inp.name, note)
        h, w, c = material.image.shape
        rate_kw = dict(hidden=params["hidden"], layers=params["layers"], pe_octaves=params["pe_octaves"],
                       bits=params["latent_bits"], mips=params["mips"], mode=params["latents"],
                       features=params["features"])
        # margin and bcn weighting steer by BCn at equal bytes: its report ships even without `baseline`
        compare = params["baseline"] or params["weighting"] != "uniform"
        with SideWork() as side:   # what needs no training encodes beside it (bakery.overlap)
            training = SetTraining(ctx, inp.name, material, params, side=side)
            chosen = None if params["target_psnr"] > 0 else choose(w, h, c, params["bpp"], **rate_kw)
            if chosen is not None and compare:   # first: steering waits for it at its first pause
                training.start_bcn(chosen.bpp)
            sources = self._encode_sources(side, material, params)
            if chosen is None:
                trained, tried = training.search(ladder(w, h, c, **rate_kw), params["target_psnr"])
            else:
                trained, tried = training.train(chosen), []
            point = trained.point
            previews = {role: side.submit("encoding", encode_png, image)
                        for role, image in material.split(trained.decoded).items()}
            baseline = training.bcn_at(point.bpp) if compare else None
            shown = ({role: side.submit("encoding", encode_png, image)
                      for role, image in training.bcn_images(point.bpp).items()} if params["baseline"] else {})
            with phases.time("metrics"):
                mip_images = trained.decode_mips(material.normal_channel)
            with phases.time("encoding"):
                files = self._write(ctx.out, trained, material, mip_images, params, previews)
            if params["baseline"]:   # what the viewer shows beside the decode: the source and BCn at mip 0
                for role, png in sources.items():
                    ctx.out.write_bytes(f"source_{role}.png", png.result(), role="reference")
                for role, png in shown.items():
                    ctx.out.write_bytes(f"baseline_{role}.png", png.result(), role="baseline")
                files["references"] = {"source": "source_{role}.png", "baseline": "baseline_{role}.png"}
        section = ntc_section(trained, material, mip_images, files, params, baseline=baseline, tried=tried,
                              role_weights=training.role_weights(point, trained.steering),
                              device_class=params.device_class)
        metrics = {"bpp": round(point.bpp, 4), "psnr_db": {r: round(v, 3) for r, v in trained.scores.items()},
                   "mean_psnr_db": round(trained.mean_psnr, 3), "set_psnr_db": round(set_psnr(trained.scores.values()), 3)}
        ctx.log.info("%s: %dx%d, %d channels, %.2f bpp, mean PSNR %.2f dB", inp.name, w, h, c, point.bpp,
                     metrics["mean_psnr_db"])
        verdict = None if baseline is None else against_bcn(trained.scores, baseline, metrics["set_psnr_db"],
                                                            budget_reason(PRESETS, params))
        return StageResult(metrics=metrics, verdict=verdict, manifest={"ntc": section})

    @classmethod
    def report_section(cls, view) -> str:
        from bakery import reporting
        from bakery.stages.ntc.report import rate_distortion

        return reporting.section(view, extra=[rate_distortion(view.manifest)])

    @staticmethod
    def _encode_sources(side, material, params) -> dict:
        """The source textures' PNGs (the viewer's references), encoding beside training."""
        if not params["baseline"]:
            return {}
        return {role: side.submit("encoding", encode_png, image)
                for role, image in material.split(material.image).items()}

    def _write(self, out, trained, material, mip_images, params, previews: dict) -> dict:
        """Writes the bundle's files (``previews``: the decoded set's PNGs by role, encoding
        beside); returns their names by part (the manifest's ``files``)."""
        point, grid = trained.point, trained.point.grid
        net_params = trained.trainer.params()
        out.write_weights("weights.bin", point.network, net_params)
        raw_levels = packing.split_levels(grid, trained.fit.raw_latents())
        if grid.mode == "packed":
            latent_file = "latents.bin"
            out.write_bytes(latent_file, packing.pack(grid, [packing.quantize(v, grid.bits) for v in raw_levels]),
                            role="latents")
        else:
            latent_file = "latents.dds"
            blocks, _ = bc4.encode_levels(raw_levels)
            out.write_texture(latent_file, "bc4_unorm", blocks, width=grid.grid_width, height=grid.grid_height,
                              array=True, role="latents")
        for role, png in previews.items():
            out.write_bytes(f"preview_{role}.png", png.result(), role="preview")
        out.write_decoder_artifacts(point.network, params=net_params, shaders=LANGUAGES)
        decoders = {lang: f"ntc_decode.{ext}" for lang, ext in EXTENSIONS.items()}
        mip_decoders = {lang: f"ntc_decode_mip.{ext}" for lang, ext in COMPUTE_LANGUAGES.items()}
        shader_kw = dict(normal_channel=material.normal_channel, prefix=out.symbol_prefix)
        for lang, name in decoders.items():
            out.write_bytes(name, generate_ntc_decoder(grid, point.network, lang, **shader_kw).encode(), role="shader")
        for lang, name in mip_decoders.items():
            out.write_bytes(name, generate_ntc_mip_decoder(grid, point.network, lang, **shader_kw).encode(),
                            role="shader")
        if params["transcode"] == "bcn":
            self._transcode(out, [material.split(np.clip(im, 0, 1)) for im in mip_images])
        return {"latents": latent_file, "weights": "weights.bin", "decoders": decoders, "mip_decoders": mip_decoders,
                "symbol_prefix": out.symbol_prefix}

    @staticmethod
    def _transcode(out, mips: list[dict]) -> None:
        from bakery.baselines.transcode import transcode_to_bcn

        per_mip = [transcode_to_bcn(m) for m in mips]
        for role, (fmt, _, width, height) in per_mip[0].items():
            out.write_texture(f"transcoded_{role}.dds", fmt, [m[role][1] for m in per_mip], width=width,
                              height=height, role="transcoded")


#: What a GPU bake reaches, for the reason beside a CPU-budget loss (bench/RESULTS.md, "ntc").
GPU_MARGIN_NOTE = "on a GPU, margin weighting puts all 30 sample textures >= 2 dB over BCn at equal bytes at 8 bpp"


def against_bcn(scores: dict, report: dict, set_db: float, budget: str):
    """The set (PSNR of the mean MSE) and each texture against BCn downscaled to the same bytes."""
    theirs = {r: report["textures"][r]["same_bytes_psnr"] for r in scores}
    parts = [part(r, scores[r], theirs[r], margin_of_psnr(scores[r], theirs[r])) for r in scores]
    reason = "; ".join(x for x in (budget, GPU_MARGIN_NOTE if budget.startswith("CPU") else "") if x)
    return psnr_verdict(f"BCn at equal bytes ({report['same_bytes']['bpp']:.2f} bpp)", set_db,
                        set_psnr(theirs.values()), metric="set PSNR (dB)", reason=reason, parts=parts)
