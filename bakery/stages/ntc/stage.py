"""Stage ``ntc``: neural texture compression of a whole material texture set.

All textures of one material (up to 16 channels) become two levels of low-bit latent
textures plus one small decoder MLP; any texel of any channel decodes on its own.
The same run encodes the set with the classical formats a studio ships today (BC7
colour, BC5 normal, BC4 single channels) and reports both, also at equal bytes.
"""

from __future__ import annotations

import numpy as np

from bakery.formats.images import mean_psnr, psnr
from bakery.stages.ntc.objective import LATENT_BITS, LatentTextureFit
from bakery.nn.optimizers import Adam
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.stages.ntc.material import ROLES, load_material, renormalize_normals
from bakery.stages.ntc.rate import candidates, choose
from bakery.stages.ntc.shader import generate_ntc_decoder
from bakery.stages import Param, Stage, StageResult, register
from bakery.stages.base import StepProgress


def _weight_params():
    return tuple(Param(f"weight_{r}", float, 1.0, f"loss weight of the {r} channels", min=0.0, max=100.0)
                 for r in ROLES)


@register
class NeuralTextureCompression(Stage):
    type_name = "ntc"
    version = "1"
    description = "compress a material's texture set into latent textures + a decoder MLP"
    input_roles = tuple(ROLES)
    params = (
        Param("bpp", float, 8.0, "bits per texel for the whole set, latents and decoder", min=0.5, max=20.0),
        Param("target_psnr", float, 0.0, "if > 0: the cheapest rate whose mean PSNR reaches this (overrides bpp)",
              min=0.0, max=80.0),
        Param("steps", int, 3000, "training steps per trained rate", min=1, max=1_000_000),
        Param("batch", int, 1 << 16, "texels per step", min=64, max=1 << 22),
        Param("hidden", int, 64, "decoder hidden width", min=8, max=128),
        Param("layers", int, 2, "decoder hidden layers", min=1, max=4),
        Param("latent_bits", int, 4, "bits per latent feature", choices=LATENT_BITS),
        Param("pe_octaves", int, 3, "texel position-encoding octaves", min=0, max=6),
        Param("lr", float, 5e-3, "decoder learning rate", min=1e-6, max=1.0),
        Param("latent_lr", float, 2e-2, "latent learning rate", min=1e-6, max=1.0),
        Param("baseline", bool, True, "also encode BC7/BC5/BC4 and report them"),
        Param("transcode", str, "none", "also write BCn DDS files decoded from the network",
              choices=("none", "bcn")),
        *_weight_params(),
    )

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        material = load_material(dict(inp.files))
        h, w, c = material.image.shape
        points = candidates(w, h, c, hidden=params["hidden"], layers=params["layers"],
                            bits=params["latent_bits"], pe_octaves=params["pe_octaves"])
        weights = np.concatenate([np.full(n, params[f"weight_{r}"], np.float32)
                                  for r, (_, n) in zip(material.roles, material.slices)])
        cfg = TrainConfig(steps=params["steps"], batch=params["batch"], optimizer=Adam(lr=params["lr"]),
                          schedule="cosine", seed=ctx.seed)

        def train(point):
            obj = LatentTextureFit(ctx.device, material.image, point.grid, channel_weights=weights,
                                   normal_channel=material.normal_channel, latent_lr=params["latent_lr"],
                                   seed=ctx.seed)
            trainer = Trainer(ctx.device, point.network, obj, cfg)
            trainer.train(progress=StepProgress(ctx, cfg.steps))
            decoded = renormalize_normals(obj.decode(trainer), material.normal_channel)
            scores = {r: psnr(decoded[..., a:a + n], material.image[..., a:a + n])
                      for r, (a, n) in zip(material.roles, material.slices)}
            return point, obj, trainer, decoded, scores

        tried = []
        if params["target_psnr"] > 0:
            result = self._search_rate(points, params["target_psnr"], train, tried, ctx)
        else:
            result = train(choose(points, params["bpp"]))
        point, obj, trainer, decoded, scores = result
        net_params = trainer.params()
        levels = obj.quantized_latents()
        top = (1 << point.grid.bits) - 1

        out = ctx.out
        out.write_weights("weights.bin", point.network, net_params)
        for k, codes in enumerate(levels):
            layers = codes.shape[2] // 4
            arr = (codes.astype(np.float32) / top).reshape(codes.shape[0], codes.shape[1], layers, 4)
            arr = np.ascontiguousarray(arr.transpose(2, 0, 1, 3))  # [layers, H, W, 4]
            for ext in ("dds", "ktx2"):
                out.write_texture(f"latents_{k}.{ext}", "rgba8_unorm", [arr], array=True, role="latents",
                                  supercompression="zstd" if ext == "ktx2" else "none")
        for role, image in material.split(decoded).items():
            out.write_png(f"preview_{role}.png", image)
        out.write_decoder_artifacts(point.network, params=net_params, shaders=("slang", "hlsl"))
        out.write_bytes("ntc_decode.slang", generate_ntc_decoder(point.grid, point.network).encode(), role="shader")

        metrics = {"bpp": round(point.bpp, 4), "psnr_db": {r: round(v, 3) for r, v in scores.items()},
                   "mean_psnr_db": round(mean_psnr(scores.values()), 3)}
        extra = {"material": {"roles": list(material.roles),
                              "channels": {r: [a, n] for r, (a, n) in zip(material.roles, material.slices)},
                              "width": w, "height": h, "normal_channel": material.normal_channel},
                 "latents": point.grid.to_dict(),
                 "rate": {"bits": point.bits, "latent_bits": point.grid.latent_bits,
                          "decoder_bits": point.bits - point.grid.latent_bits, "bpp": point.bpp,
                          "requested_bpp": params["bpp"] if params["target_psnr"] <= 0 else None,
                          "tried": tried}}
        if params["baseline"] or params["transcode"] == "bcn":
            from bakery.baselines.material import baseline_report

            textures = material.split(material.image)
            report = baseline_report(textures, neural_bpp=point.bpp)
            extra["baseline"] = report
            if params["transcode"] == "bcn":
                self._transcode(out, material.split(decoded))
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
    def _transcode(out, decoded: dict) -> None:
        from bakery.baselines.transcode import transcode_to_bcn

        for role, (fmt, blocks, width, height) in transcode_to_bcn(decoded).items():
            out.write_texture(f"transcoded_{role}.dds", fmt, [blocks], width=width, height=height, role="transcoded")
