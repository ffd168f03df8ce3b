"""A small, valid NTC bundle written directly with the bundle writer (no training): the
starting point of the safety tests and the bundle-reader fuzz, which then damage it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bakery.formats.bundle import BundleWriter
from bakery.nn.encodings import IdentityEncoding
from bakery.nn.network import NetworkSpec
from bakery.stages.ntc.texture_set import LatentGridSpec
from bakery.stages.ntc.packing import pack, quantize

ROLES = {"albedo": (0, 3), "normal": (3, 3), "roughness": (6, 1)}


def write_ntc_bundle(folder: Path, *, size: int = 8, mips: bool = True, mode: str = "packed") -> Path:
    """``folder`` as an ntc bundle of albedo, normal and roughness, ``size``² texels."""
    grid = LatentGridSpec(width=size, height=size, grid_width=size // 2, grid_height=size // 2, features=4,
                          bits=4, pe_octaves=1, mips=mips, mode=mode)
    spec = NetworkSpec(encoding=IdentityEncoding(grid.n_inputs), hidden=(8,), n_outputs=7,
                       output_activation="sigmoid")
    rng = np.random.default_rng(0)
    w = BundleWriter(folder)
    w.write_weights("weights.bin", spec, spec.init_params(1))
    levels = [rng.uniform(size=(h, wd, f)) for wd, h, f in grid.levels]
    if mode == "packed":
        w.write_bytes("latents.bin", pack(grid, [quantize(v, grid.bits) for v in levels]), role="latents")
        name = "latents.bin"
    else:
        from bakery.stages.ntc.bc4 import encode_levels

        blocks, _ = encode_levels(levels)
        w.write_texture("latents.dds", "bc4_unorm", blocks, width=grid.grid_width, height=grid.grid_height,
                        array=True, role="latents")
        name = "latents.dds"
    w.finalize({"stage": {"type": "ntc", "version": "1"}, "params": {}, "seed": 0, "device": None, "metrics": {},
                "ntc": {"material": {"roles": list(ROLES), "channels": {r: list(v) for r, v in ROLES.items()},
                                     "color_space": {r: "linear" for r in ROLES}, "width": size, "height": size,
                                     "normal_channel": 3},
                        "files": {"latents": name, "weights": "weights.bin"},
                        "latents": grid.to_dict()}})
    return folder


def edit_manifest(folder: Path, edit) -> None:
    """Rewrites ``folder``'s manifest.json through ``edit(manifest)`` (it is not hashed itself)."""
    path = Path(folder) / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
