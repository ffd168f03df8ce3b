"""The ``ntc`` section of a bundle's manifest: everything an engine or tool needs to decode
the bundle without reading our code (material layout, latent grid, packing, decoder
inputs, sampling conventions), the rate as GPU-resident bytes, and how it was trained.
docs/FORMAT.md describes the same fields for people."""

from __future__ import annotations

from bakery.imaging import psnr, set_psnr
from bakery.materials import SRGB_ROLES
from bakery.stages.ntc import packing
from bakery.stages.ntc.texture_set import LatentGridSpec

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


def ntc_section(trained, material, mip_images, files: dict, params: dict, *, role_weights: dict, baseline,
                tried: list, device_class: str) -> dict:
    """The manifest's ``ntc`` section of one baked set. ``trained`` is the kept rate
    (ntc/training.py's TrainedRate), ``mip_images`` its decoded colour mips, ``files`` the
    bundle's file names by part, ``baseline`` the BCn report at its rate (or None)."""
    point, fit, grid = trained.point, trained.fit, trained.point.grid
    latent_file = files["latents"]
    w, h = grid.width, grid.height
    steps = params["steps"]
    section = {
        "material": {"roles": list(material.roles),
                     "channels": {r: [a, n] for r, (a, n) in zip(material.roles, material.slices)},
                     "color_space": {r: "srgb" if r in SRGB_ROLES else "linear" for r in material.roles},
                     "width": w, "height": h, "normal_channel": material.normal_channel},
        "files": files,
        "latents": grid.to_dict(),
        "packing": packing_doc(grid),
        "decoder_inputs": input_layout(grid),
        "conventions": CONVENTIONS,
        "rate": {"bits": point.bits, "latent_bits": point.latent_bits, "decoder_bits": point.decoder_bits,
                 "bpp": point.bpp, "gpu_resident_bytes": {latent_file: point.latent_bits // 8,
                                                          "weights.bin": point.decoder_bits // 8},
                 "requested_bpp": params["bpp"] if params["target_psnr"] <= 0 else None,
                 "texels": w * h, "tried": tried},
        # per colour mip, set PSNR (mean MSE) against the box-filtered chain
        "mip_psnr_db": [round(set_psnr([psnr(im[..., a:a + n], ref[..., a:a + n]) for a, n in material.slices]), 3)
                        for im, ref in zip(mip_images, fit.pyramid)],
        "training": {"device_class": device_class, "quality": params["quality"], "steps": steps,
                     "batch": params["batch"], "hidden": params["hidden"],
                     "bc_refresh": params["bc_refresh"] if grid.mode == "bc" else None,
                     "noise_steps": fit.noise_steps,
                     "latents_frozen_from_step": trained.latents_frozen_from,
                     "weighting": params["weighting"],
                     "role_weights": {r: round(params[f"weight_{r}"] * role_weights[r], 4) for r in material.roles},
                     "weighting_rounds": trained.steering.rounds if trained.steering is not None else [],
                     "loss": "weighted L2 in storage space (albedo: sRGB-encoded values, as BC7_SRGB "
                             "stores and the PSNR measures), normals renormalised before the loss"},
    }
    if baseline is not None:
        section["baseline"] = baseline
    return section


def packing_doc(grid: LatentGridSpec) -> dict:
    if grid.mode == "bc":
        return {"format": "BC4_UNORM texture array (DDS, DXGI 80): array layer f = feature f, mip level k = "
                          "latent level k", "bits_per_feature_texel": 4}
    offsets = packing.word_offsets(grid)
    return {"format": "little-endian uint32 words; element e = (y * gw + x) * F + f of level k is bits "
                      "[(e % n) * b, +b) of word word_offsets[k] + e / n; value = code / (2^b - 1)",
            "bits": grid.bits, "codes_per_word": packing.codes_per_word(grid.bits), "word_offsets": offsets[:-1],
            "words": offsets[-1]}


def input_layout(grid: LatentGridSpec) -> list[dict]:
    f, p = grid.features, grid.pe_octaves
    return [{"first": 0, "count": f, "what": "latent level a (= latent_level of the colour mip), bilinear"},
            {"first": f, "count": f, "what": "latent level a + 1, bilinear"},
            {"first": 2 * f, "count": 4 * p, "what": "per octave k < pe_octaves: tri(x'), tri(x' + 1/4), tri(y'), "
             "tri(y' + 1/4) with x' = (x + 0.5) / 2^(k+1) in mip texels, tri(t) = |2 frac(t) - 1|"},
            {"first": 2 * f + 4 * p, "count": 1, "what": "LOD * 0.25"}]
