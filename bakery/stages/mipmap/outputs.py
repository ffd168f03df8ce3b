"""What stage ``mipmap`` ships: its chains in engine formats, and rendered previews.

Textures carry every authored level (0 = the source map, then the trained ones) in DDS
and KTX2: BC5 normal (XY; engines rebuild Z), BC4 roughness and, when albedo trained,
BC7 sRGB albedo; or 8-bit uncompressed (RGBA normal, R roughness, sRGB RGBA albedo).
An engine layout other than ``separate`` (bakery.layouts) packs them as that engine
imports them: the trained roughness beside the source's metalness and AO (box-filtered
down the chain) in an ORM or mask map (BC7, or RGBA8), normals in its convention. The
Toksvig chain, the baseline, ships beside them as DDS (role ``baseline``).
"""

from __future__ import annotations

import numpy as np

from bakery.baselines import bcn
from bakery.imaging import box_down, linear_to_srgb
from bakery.layouts import pack
from bakery.stages.mipmap.chain import MipChain
from bakery.stages.mipmap.material import MipMaterial

#: (BCn format of bcn.encode, container format) and the uncompressed alternative, per map.
STORAGE = {
    "normal": {"bcn": ("bc5", "bc5_unorm"), "uncompressed": "rgba8_unorm"},
    "roughness": {"bcn": ("bc4", "bc4_unorm"), "uncompressed": "r8_unorm"},
    "albedo": {"bcn": ("bc7", "bc7_srgb"), "uncompressed": "rgba8_srgb"},
}
PREVIEW_MIN_WIDTH = 128


def stored_levels(material: MipMaterial, chain: MipChain, trained) -> dict[str, list[np.ndarray]]:
    """Every level of each shipped map in its storage encoding ([0, 1] floats)."""
    normals, roughness, albedo = trained
    maps = {
        "normal": [material.normal] + chain.unpack(normals, 3),
        "roughness": [material.roughness] + chain.unpack(roughness, 1),
        "albedo": [material.albedo] + chain.unpack(albedo, 3),
    }
    return {"normal": [n * 0.5 + 0.5 for n in maps["normal"]],
            "roughness": [np.clip(r, 0.0, 1.0) for r in maps["roughness"]],
            "albedo": [linear_to_srgb(a) for a in maps["albedo"]]}


#: One texture to write: (file name, container format, mips, write_texture keyword arguments).
Encoded = tuple[str, str, list, dict]


def write_chains(out, material: MipMaterial, chain: MipChain, trained, storage: str, *, albedo: bool,
                 layout: str = "separate", normal_convention: str | None = None, prefix: str = "",
                 role: str = "texture", containers: tuple[str, ...] = ("dds", "ktx2"),
                 level0: dict[str, bytes] | None = None) -> None:
    """``normal``, ``roughness`` (and ``albedo``) as .dds and .ktx2 with all authored
    levels, one texture per role or packed in an engine ``layout``; file names start with
    ``prefix`` and are recorded under ``role``. ``level0``: level 0's BCn blocks by map,
    encoded before (:func:`level0_blocks`, beside training)."""
    write_encoded(out, encode_chains(material, chain, trained, storage, albedo=albedo, layout=layout,
                                     normal_convention=normal_convention, prefix=prefix, role=role,
                                     containers=containers, level0=level0))


def encode_chains(material: MipMaterial, chain: MipChain, trained, storage: str, *, albedo: bool,
                  layout: str = "separate", normal_convention: str | None = None, prefix: str = "",
                  role: str = "texture", containers: tuple[str, ...] = ("dds", "ktx2"),
                  level0: dict[str, bytes] | None = None) -> list[Encoded]:
    """What :func:`write_chains` writes, encoded and not yet written (a pure function of
    its arguments, so it can run beside training: bakery.overlap)."""
    levels = stored_levels(material, chain, trained)
    maps = ("normal", "roughness", "albedo") if albedo else ("normal", "roughness")
    if layout != "separate" or normal_convention not in (None, "gl"):
        return _encode_packed(material, chain, {r: levels[r] for r in maps}, storage, layout, normal_convention,
                              prefix, role, containers)
    textures = []
    for name in maps:
        fmt, mips, kwargs = _encoded(name, levels[name], storage, chain, (level0 or {}).get(name))
        textures += [(f"{prefix}{name}.{ext}", fmt, mips, dict(kwargs, role=role)) for ext in containers]
    return textures


def write_encoded(out, textures: list[Encoded]) -> None:
    for name, fmt, mips, kwargs in textures:
        out.write_texture(name, fmt, mips, **kwargs)


def level0_maps(albedo: bool, storage: str, layout: str, normal_convention: str | None) -> tuple[str, ...]:
    """The maps whose level 0 (the source map) :func:`level0_blocks` can encode before
    training: those of a separate layout stored as BCn (a packed or uncompressed texture
    costs little to encode, or packs trained levels with it)."""
    if storage != "bcn" or layout != "separate" or normal_convention not in (None, "gl"):
        return ()
    return ("normal", "roughness", "albedo") if albedo else ("normal", "roughness")


def level0_blocks(material: MipMaterial, name: str) -> bytes:
    """Level 0 of map ``name`` as :func:`write_chains` stores it in BCn: the source map,
    known before training (BC7 of a 2K albedo costs seconds of CPU)."""
    codec, _ = STORAGE[name]["bcn"]
    source = {"normal": material.normal * 0.5 + 0.5, "roughness": np.clip(material.roughness, 0.0, 1.0),
              "albedo": linear_to_srgb(material.albedo)}[name]
    return bcn.encode(source[..., :_KEEP[codec]], codec)


def write_baseline_chain(out, material: MipMaterial, chain: MipChain, filtered, storage: str, name: str, *,
                         layout: str = "separate", normal_convention: str | None = None) -> None:
    """A classical filter's chain (``name``: toksvig) as a studio would ship it instead,
    stored and laid out as the trained one (``{name}_normal.dds``, ``{name}_roughness.dds``
    or the layout's packed textures), DDS only, so a viewer draws both chains level by level.
    Its albedo is the box chain's, which a viewer makes from level 0, so it is not written."""
    write_encoded(out, encode_baseline_chain(material, chain, filtered, storage, name, layout=layout,
                                             normal_convention=normal_convention))


def encode_baseline_chain(material: MipMaterial, chain: MipChain, filtered, storage: str, name: str, *,
                          layout: str = "separate", normal_convention: str | None = None) -> list[Encoded]:
    """What :func:`write_baseline_chain` writes, encoded (it needs no training)."""
    return encode_chains(material, chain, filtered, storage, albedo=False, layout=layout,
                         normal_convention=normal_convention, prefix=f"{name}_", role="baseline",
                         containers=("dds",))


_KEEP = {"bc5": 2, "bc4": 1, "bc7": 3}


def _encoded(role: str, images: list[np.ndarray], storage: str, chain: MipChain,
             first: bytes | None = None) -> tuple[str, list, dict]:
    """(container format, mips, write_texture size arguments) of one map's levels
    (``first``: level 0's blocks, encoded before)."""
    if storage == "bcn":
        codec, fmt = STORAGE[role][storage]
        keep = _KEEP[codec]
        head = [first] if first is not None else [bcn.encode(images[0][..., :keep], codec)]
        return fmt, head + [bcn.encode(img[..., :keep], codec) for img in images[1:]], {"width": chain.width,
                                                                                         "height": chain.height}
    mips = [img if img.shape[2] != 3 else np.concatenate([img, np.ones_like(img[..., :1])], axis=2) for img in images]
    return STORAGE[role][storage], mips, {}


#: A packed texture's storage by what it holds (bakery.layouts.Packed.kind).
PACKED_STORAGE = {
    "normal": {"bcn": ("bc5", "bc5_unorm", 2), "uncompressed": ("rgba8_unorm", 4)},
    "albedo": {"bcn": ("bc7", "bc7_srgb", 3), "uncompressed": ("rgba8_srgb", 4)},
    None: {"bcn": ("bc7", "bc7_unorm", 4), "uncompressed": ("rgba8_unorm", 4)},
    "single": {"bcn": ("bc4", "bc4_unorm", 1), "uncompressed": ("r8_unorm", 1)},
}


def _encode_packed(material: MipMaterial, chain: MipChain, levels: dict[str, list[np.ndarray]], storage: str,
                   layout: str, normal_convention: str | None, prefix: str, file_role: str,
                   containers: tuple[str, ...]) -> list[Encoded]:
    for role, source in (("metalness", material.metalness), ("ao", material.ao)):
        if source is not None:
            chain_of = [source]
            for _ in range(chain.deepest):
                chain_of.append(box_down(chain_of[-1]).astype(np.float32))
            levels[role] = chain_of
    per_level = [pack({r: v[i] for r, v in levels.items()}, layout, normal_convention=normal_convention)
                 for i in range(chain.deepest + 1)]
    textures = []
    for name, (_, kind) in per_level[0].items():
        images = [p[name][0] for p in per_level]
        channels = images[0].shape[2]
        spec = PACKED_STORAGE[kind if kind in ("normal", "albedo") else "single" if channels == 1 else None][storage]
        if storage == "bcn":
            codec, fmt, keep = spec
            if codec == "bc7" and channels == 3:
                images = [np.concatenate([img, np.ones_like(img[..., :1])], axis=2) for img in images]
            mips = [bcn.encode(img[..., :keep], codec) for img in images]
            kwargs = {"width": chain.width, "height": chain.height}
        else:
            fmt, want = spec
            mips = [np.concatenate([img] + [np.ones_like(img[..., :1])] * (want - img.shape[2]), axis=2)
                    if img.shape[2] < want else img for img in images]
            kwargs = {}
        textures += [(f"{prefix}{name}.{ext}", fmt, mips, dict(kwargs, role=file_role)) for ext in containers]
    return textures


def _upscaled(image: np.ndarray) -> np.ndarray:
    f = max(1, PREVIEW_MIN_WIDTH // image.shape[1])
    return np.repeat(np.repeat(image, f, axis=0), f, axis=1)


def write_previews(out, reference: list, renders: dict) -> None:
    """``preview_level{L}.png`` per level: reference | trained | box, rendered, sRGB."""
    for i, ref in enumerate(reference):
        panels = [ref, renders["trained"][i], renders["box"][i]]
        gap = np.ones((_upscaled(ref).shape[0], 2, 3), np.float32)
        row = [linear_to_srgb(_upscaled(p)) for p in panels]
        out.write_png(f"preview_level{i + 1}.png", np.concatenate([row[0], gap, row[1], gap, row[2]], axis=1))


def flip_error(reference: np.ndarray, test: np.ndarray) -> float:
    """Mean NVIDIA FLIP (LDR) between two tone-mapped renders, compared as sRGB images."""
    import flip_evaluator

    ref = np.ascontiguousarray(linear_to_srgb(reference), np.float32)
    tst = np.ascontiguousarray(linear_to_srgb(test), np.float32)
    _, mean, _ = flip_evaluator.evaluate(ref, tst, "LDR", inputsRGB=True, applyMagma=False)
    return float(mean)
