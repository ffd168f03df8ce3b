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

from bakery.errors import UsageError
from bakery.formats.images import image_size, mean_psnr, psnr, set_psnr
from bakery.materials import ROLES, SRGB_ROLES, load_material, renormalize_normals
from bakery.nn.optimizers import Adam
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.stages.base import Stage, StageResult, StepProgress, register
from bakery.stages.ntc import bc4, packing
from bakery.stages.ntc.objective import LATENT_BITS, LATENT_MODES, LatentTextureFit
from bakery.stages.ntc.rate import choose, ladder
from bakery.stages.ntc.shader import LANGUAGES, generate_ntc_decoder
from bakery.stages.ntc.weighting import MarginSteering, bcn_weights
from bakery.stages.params import AUTO, QUALITY, Param, Presets

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
    cost 0.13 dB (bench/RESULTS.md, tenth session). Below COHERENT_FROM: independent
    texels, dense updates."""
    if texels < COHERENT_FROM:
        return dict(preset, patches=False, latent_updates="dense")
    return preset


def sample_layout(params: dict) -> dict:
    """Lines asked for take the place of automatic patches (both asked for is refused
    before the run: NeuralTextureCompression.check_params)."""
    return dict(params, patches=False) if params["line_texels"] else params


PRESETS = Presets({
    "cpu": {"preview": {"steps": 150, "batch": 1 << 12, "hidden": 32, "bc_refresh": 25, "latent_bits": 4, **_CPU},
            "production": {"steps": 300, "batch": 1 << 12, "hidden": 32, "bc_refresh": 25, "latent_bits": 4, **_CPU},
            "final": {"steps": 1000, "batch": 1 << 12, "hidden": 32, "bc_refresh": 50, "latent_bits": 4, **_CPU}},
    "gpu": {"preview": {"steps": 3000, **_GPU},
            "production": {"steps": 6000, **_GPU},
            "final": {"steps": 20000, **_GPU}},
}, fit=_fit_to_set)
FREEZE_FRACTION = 0.05


def _weight_params():
    return tuple(Param(f"weight_{r}", float, 1.0, f"loss weight of the {r} channels", min=0.0, max=100.0)
                 for r in ROLES)


@register
class NeuralTextureCompression(Stage):
    type_name = "ntc"
    version = "4"
    description = "compress a material's texture set (with mips) into latent textures + a decoder MLP"
    input_roles = tuple(ROLES)
    presets = PRESETS
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
        what the latent mode and sample layout imply: BC4 holds 4-bit codes whatever the
        preset says, and lines asked for replace automatic patches."""
        first = next((r for r in ROLES if r in files), None)
        if first is None:
            raise UsageError("no textures in material", key="inputs")
        w, h = image_size(files[first], key=first)
        params = PRESETS.resolve(params, device_class=device_class, size=h * w)
        if params["latents"] == "bc":
            params = dict(params, latent_bits=4)
        return sample_layout(params)

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        material = load_material(dict(inp.files))
        h, w, c = material.image.shape
        steps, batch, refresh, hidden = params["steps"], params["batch"], params["bc_refresh"], params["hidden"]
        rate_kw = dict(hidden=hidden, layers=params["layers"], pe_octaves=params["pe_octaves"],
                       bits=params["latent_bits"], mips=params["mips"],
                       mode=params["latents"], features=params["features"])
        textures = material.split(material.image)

        weighting = params["weighting"]
        bcn_reports = {}

        def bcn_at(bpp):
            """The BCn shipping set and its comparison at ``bpp``'s bytes (one encode per rate)."""
            if bpp not in bcn_reports:
                from bakery.baselines.material import baseline_report
                bcn_reports[bpp] = baseline_report(textures, neural_bpp=bpp)
            return bcn_reports[bpp]

        # margin and bcn weighting steer by BCn at equal bytes: they encode it even without `baseline`
        report = None
        if params["baseline"] or weighting != "uniform":
            first = choose(w, h, c, params["bpp"], **rate_kw) if params["target_psnr"] <= 0 else None
            report = bcn_at(first.bpp if first else params["bpp"])
        channels = {r: n for r, (_, n) in zip(material.roles, material.slices)}
        role_w = bcn_weights(report, material.roles, channels) if weighting == "bcn" else {r: 1.0 for r in material.roles}

        def to_channel_weights(role_weights):
            return np.concatenate([np.full(n, params[f"weight_{r}"] * role_weights[r], np.float32)
                                   for r, (_, n) in zip(material.roles, material.slices)])

        weights = to_channel_weights(role_w)
        cfg = TrainConfig(steps=steps, batch=batch, optimizer=Adam(lr=params["lr"]), schedule="cosine",
                          seed=ctx.seed)

        # lazy latent updates read only the cells the training kernel marked (the same updates)
        lazy = params["latent_updates"] == "lazy"

        def scores_of(obj, trainer):
            decoded = renormalize_normals(obj.decode(trainer), material.normal_channel)
            return decoded, {r: psnr(decoded[..., a:a + n], material.image[..., a:a + n])
                             for r, (a, n) in zip(material.roles, material.slices)}

        def train(point):
            obj = LatentTextureFit(ctx.device, material.image, point.grid, channel_weights=weights,
                                   normal_channel=material.normal_channel, latent_lr=params["latent_lr"],
                                   seed=ctx.seed, noise_steps=int(params["noise_fraction"] * cfg.steps),
                                   lazy_latents=lazy, touched_cells=lazy, line_texels=params["line_texels"],
                                   patches=params["patches"])
            trainer = Trainer(ctx.device, point.network, obj, cfg)
            progress = StepProgress(ctx, cfg.steps)
            freeze = cfg.steps - int(FREEZE_FRACTION * cfg.steps)
            steering = None
            if weighting == "margin":
                steerable = [r for r in material.roles if params[f"weight_{r}"] > 0]
                steering = MarginSteering(bcn_at(point.bpp), material.roles, steerable, channels,
                                          params["margin_db"], freeze)

            def advance(end):
                """Trains to step ``end``, stopping at each of the steering's pauses on the way
                to decode the set and hand the textures new weights."""
                end = min(end, cfg.steps)
                while True:
                    at = steering.next_pause() if steering is not None else None
                    if at is not None and at <= trainer.step:
                        if point.grid.mode == "bc":
                            _refresh_bc(obj)   # measure the latents as they would ship
                        now = scores_of(obj, trainer)[1]
                        obj.set_channel_weights(to_channel_weights(steering.pause(trainer.step, now)))
                        last = steering.rounds[-1]
                        ctx.log.info("%s: step %d, margins over BCn at equal bytes %s; weights now %s", inp.name,
                                     trainer.step, last["margin_db"], last["margin_weights"])
                        continue
                    if trainer.step >= end:
                        return
                    trainer.train((end if at is None else min(end, at)) - trainer.step, progress=progress)

            if point.grid.mode == "bc":
                while trainer.step < cfg.steps:
                    _refresh_bc(obj)
                    advance(trainer.step + refresh)
                _refresh_bc(obj)
            else:
                advance(freeze)
                # the last steps fit the decoder to the final codes, latents frozen (as RTXNTC)
                obj.latents.lr = 0.0
                advance(cfg.steps)
            decoded, scores = scores_of(obj, trainer)
            return point, obj, trainer, decoded, scores, steering

        tried = []
        if params["target_psnr"] > 0:
            result = self._search_rate(ladder(w, h, c, **rate_kw), params["target_psnr"], train, tried, ctx)
        else:
            result = train(choose(w, h, c, params["bpp"], **rate_kw))
        point, obj, trainer, decoded, scores, steering = result
        if steering is not None:
            role_w = steering.weights
        grid = point.grid
        net_params = trainer.params()
        if report is not None:
            report = bcn_at(point.bpp)

        out = ctx.out
        out.write_weights("weights.bin", point.network, net_params)
        raw_levels = packing.split_levels(grid, obj.raw_latents())
        if grid.mode == "packed":
            latent_file = "latents.bin"
            out.write_bytes(latent_file, packing.pack(grid, [packing.quantize(v, grid.bits) for v in raw_levels]),
                            role="latents")
        else:
            latent_file = "latents.dds"
            blocks, _ = bc4.encode_levels(raw_levels)
            out.write_texture(latent_file, "bc4_unorm", blocks, width=grid.grid_width, height=grid.grid_height,
                              array=True, role="latents")
        mip_images = [decoded] + [renormalize_normals(obj.decode_mip(trainer, m), material.normal_channel)
                                  for m in range(1, len(grid.color_mips))]
        for role, image in material.split(decoded).items():
            out.write_png(f"preview_{role}.png", image)
        out.write_decoder_artifacts(point.network, params=net_params, shaders=LANGUAGES)
        for lang in LANGUAGES:
            out.write_bytes(f"ntc_decode.{lang}", generate_ntc_decoder(grid, point.network, lang,
                                                                          normal_channel=material.normal_channel).encode(),
                            role="shader")

        mip_psnr = [round(set_psnr([psnr(im[..., a:a + n], ref[..., a:a + n]) for a, n in material.slices]), 3)
                    for im, ref in zip(mip_images, obj.pyramid)]
        lat_bytes, weights_bytes = point.latent_bits // 8, point.decoder_bits // 8
        metrics = {"bpp": round(point.bpp, 4), "psnr_db": {r: round(v, 3) for r, v in scores.items()},
                   "mean_psnr_db": round(mean_psnr(scores.values()), 3),
                   "set_psnr_db": round(set_psnr(scores.values()), 3)}
        extra = {"material": {"roles": list(material.roles),
                              "channels": {r: [a, n] for r, (a, n) in zip(material.roles, material.slices)},
                              "color_space": {r: "srgb" if r in SRGB_ROLES else "linear" for r in material.roles},
                              "width": w, "height": h, "normal_channel": material.normal_channel},
                 "files": {"latents": latent_file, "weights": "weights.bin",
                           "decoders": {lang: f"ntc_decode.{lang}" for lang in LANGUAGES}},
                 "latents": grid.to_dict(),
                 "packing": _packing_doc(grid),
                 "decoder_inputs": _input_layout(grid),
                 "conventions": CONVENTIONS,
                 "rate": {"bits": point.bits, "latent_bits": point.latent_bits, "decoder_bits": point.decoder_bits,
                          "bpp": point.bpp, "gpu_resident_bytes": {latent_file: lat_bytes, "weights.bin": weights_bytes},
                          "requested_bpp": params["bpp"] if params["target_psnr"] <= 0 else None,
                          "texels": w * h, "tried": tried},
                 "mip_psnr_db": mip_psnr,   # per colour mip, set PSNR (mean MSE) against the box-filtered chain
                 "training": {"device_class": params.device_class, "quality": params["quality"], "steps": steps, "batch": batch,
                              "hidden": hidden,
                              "bc_refresh": refresh if grid.mode == "bc" else None,
                              "noise_steps": obj.noise_steps, "latents_frozen_from_step": (
                                  None if grid.mode == "bc" else cfg.steps - int(FREEZE_FRACTION * cfg.steps)), "weighting": weighting,
                              "role_weights": {r: round(params[f"weight_{r}"] * role_w[r], 4) for r in material.roles},
                              "weighting_rounds": steering.rounds if steering is not None else [],
                              "loss": "weighted L2 in storage space (albedo: sRGB-encoded values, as BC7_SRGB "
                                      "stores and the PSNR measures), normals renormalised before the loss"}}
        if report is not None:
            extra["baseline"] = report
        if params["transcode"] == "bcn":
            self._transcode(out, [material.split(np.clip(im, 0, 1)) for im in mip_images])
        ctx.log.info("%s: %dx%d, %d channels, %.2f bpp, mean PSNR %.2f dB", inp.name, w, h, c, point.bpp,
                     metrics["mean_psnr_db"])
        return StageResult(metrics=metrics, manifest={"ntc": extra})

    @staticmethod
    def _search_rate(points, target, train, tried, ctx):
        """Bisection over rates (cheapest first) for the cheapest one that reaches target."""
        lo, hi, best, richest = 0, len(points) - 1, None, None
        while lo <= hi:
            mid = (lo + hi) // 2
            result = train(points[mid])
            mean = mean_psnr(result[4].values())
            tried.append({"bpp": round(points[mid].bpp, 4), "mean_psnr_db": round(mean, 3)})
            if mean >= target:
                best, hi = result, mid - 1
            else:
                richest, lo = result, mid + 1
        if best is None:
            ctx.log.warning("target PSNR %.2f dB not reached; keeping the richest rate tried (%.2f bpp)",
                            target, richest[0].bpp)
            return richest
        return best

    @staticmethod
    def _transcode(out, mips: list[dict]) -> None:
        from bakery.baselines.transcode import transcode_to_bcn

        per_mip = [transcode_to_bcn(m) for m in mips]
        for role, (fmt, _, width, height) in per_mip[0].items():
            out.write_texture(f"transcoded_{role}.dds", fmt, [m[role][1] for m in per_mip], width=width,
                              height=height, role="transcoded")


def _refresh_bc(obj: LatentTextureFit) -> None:
    """Re-encode the latents as BC4 and hand the training kernel decoded - raw."""
    raw = obj.raw_latents()
    _, decoded = bc4.encode_levels(packing.split_levels(obj.grid, raw))
    obj.set_block_compression_delta(np.concatenate([d.reshape(-1) for d in decoded]) - raw)


CONVENTIONS = {
    "uv": "texel (x, y) of colour mip L (width W_L, height H_L) is at u = (x + 0.5) / W_L, v = (y + 0.5) / H_L; "
          "y = 0 is the first row of the PNG/DDS (top)",
    "latent_sampling": "bilinear, clamp to edge: g = u * gw - 0.5 (same for v), taps floor(g) and floor(g) + 1 "
                       "clamped to [0, gw - 1], weights from frac(g)",
    "outputs": "raw decoder outputs in set channel order; clamp each to [0, 1]",
    "normals": "channels [normal_channel, +3) are a storage-space normal: n = 2 * out - 1, n /= |n|, "
               "store n * 0.5 + 0.5",
    "color_space": "albedo outputs are sRGB-encoded (decode to linear after the network, or write to an "
                   "*_SRGB target); every other role is linear",
}


def _packing_doc(grid) -> dict:
    if grid.mode == "bc":
        return {"format": "BC4_UNORM texture array (DDS, DXGI 80): array layer f = feature f, mip level k = "
                          "latent level k", "bits_per_feature_texel": 4}
    offsets = packing.word_offsets(grid)
    return {"format": "little-endian uint32 words; element e = (y * gw + x) * F + f of level k is bits "
                      "[(e % n) * b, +b) of word word_offsets[k] + e / n; value = code / (2^b - 1)",
            "bits": grid.bits, "codes_per_word": packing.codes_per_word(grid.bits), "word_offsets": offsets[:-1],
            "words": offsets[-1]}


def _input_layout(grid) -> list[dict]:
    f, p = grid.features, grid.pe_octaves
    return [{"first": 0, "count": f, "what": "latent level a (= latent_level of the colour mip), bilinear"},
            {"first": f, "count": f, "what": "latent level a + 1, bilinear"},
            {"first": 2 * f, "count": 4 * p, "what": "per octave k < pe_octaves: tri(x'), tri(x' + 1/4), tri(y'), "
             "tri(y' + 1/4) with x' = (x + 0.5) / 2^(k+1) in mip texels, tri(t) = |2 frac(t) - 1|"},
            {"first": 2 * f + 4 * p, "count": 1, "what": "LOD * 0.25"}]
