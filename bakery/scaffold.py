"""``bakery init``: a commented pipeline.toml for the textures a folder holds.

It looks for material folders (files named by their roles, as the ``material`` asset kind
reads them) and single textures, groups each by the folder they sit in, and writes the
stages that fit them: neural compression, trained mips and a neural material for
materials; a neural texture and a procedural program for single textures. Every table
carries a comment saying what it does and what to change, so the file is the tutorial.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from bakery.errors import UsageError

#: Image files bakery reads (formats.images): what a texture can be.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tga", ".tif", ".tiff", ".bmp")
#: Folders never searched: outputs, caches, version control, virtual environments.
SKIPPED = {"out", ".bakery-cache", "node_modules", "__pycache__", ".git", ".venv", "venv"}


@dataclass
class Found:
    """Material folders and single textures, by the folder that holds them (relative paths)."""

    materials: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)  # parent -> [(folder, roles)]
    textures: dict[tuple[str, str], list[str]] = field(default_factory=dict)        # (folder, suffix) -> names


def find_assets(root: Path) -> Found:
    """Walks ``root``: a folder whose files name two or more roles is a material; any
    other image is a single texture."""
    from bakery.materials import ROLES, role_names
    from bakery.pipeline.config import role_files

    root = Path(root)
    found = Found()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
        here = Path(folder)
        images = sorted(f for f in files if Path(f).suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            continue
        try:  # the loader's own detection: plain role names, studio conventions, packed maps
            roles = sorted(set(role_names(role_files(here, ROLES))))
        except UsageError:
            roles = []
        rel = here.relative_to(root)
        if len(roles) >= 2:
            parent = rel.parent.as_posix()
            found.materials.setdefault(parent, []).append((rel.name, sorted(roles)))
            continue
        for f in images:
            found.textures.setdefault((rel.as_posix(), Path(f).suffix), []).append(f)
    return found


def _asset_name(path: str, taken: set[str], fallback: str) -> str:
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in (Path(path).name or fallback))
    name = name if name and name[0].isalpha() else f"{fallback}_{name}"
    base, n = name, 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    taken.add(name)
    return name


def _glob(folder: str, tail: str) -> str:
    return tail if folder in ("", ".") else f"{folder}/{tail}"


def pipeline_text(root: Path, found: Found) -> str:
    """The pipeline.toml for ``found``, every table commented."""
    lines = [
        "# Written by `bakery init` for the textures it found below this folder. Edit freely:",
        "# every key is in docs/PIPELINE.md. Then: `bakery bake` (results in out/, and",
        "# out/report.html), `bakery view out` to look at them.",
        "",
        "[project]",
        f"name = {json.dumps(Path(root).resolve().name)}",
        'out = "out"                 # one folder per (stage, asset): out/<stage>/<asset>/',
        'cache = ".bakery-cache"     # a second bake with nothing changed trains nothing',
        'device = "auto"             # auto | vulkan | cuda | software; a GPU if there is one',
        "seed = 1",
    ]
    taken: set[str] = set()
    material_assets, texture_assets = [], []
    all_roles: set[str] = set()
    for parent, folders in sorted(found.materials.items()):
        name = _asset_name(parent, taken, "materials")
        material_assets.append(name)
        roles = sorted({r for _, rs in folders for r in rs})
        lines += ["", f"# {len(folders)} material folder(s) in {parent or '.'}/ ({', '.join(f for f, _ in folders[:4])}"
                      f"{', ...' if len(folders) > 4 else ''}); roles found: {', '.join(roles)}.",
                  "# One asset per folder; a role is a file named albedo, normal, roughness, metalness, ao, height, ...",
                  f"[assets.{name}]", f"material = {json.dumps(_glob(parent, '*'))}"]
        all_roles.update(roles)
    for (folder, suffix), files in sorted(found.textures.items()):
        name = _asset_name(folder, taken, "textures")
        texture_assets.append(name)
        shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
        lines += ["", f"# {len(files)} single texture(s) in {folder or '.'}/ ({shown}): one asset per file.",
                  f"[assets.{name}]", f"image = {json.dumps(_glob(folder, '*' + suffix))}"]
    if not material_assets and not texture_assets:
        raise UsageError("no textures found (looked for image files and material folders below it)", where=str(root))

    def inputs(names):
        return "[" + ", ".join(f'"{n}"' for n in names) + "]"

    if material_assets:
        ins = inputs(material_assets)
        lines += ["", "# Neural texture compression: each material's whole texture set as latent textures plus",
                  "# one small decoder, at `bpp` GPU-resident bits per texel; judged against BCn at equal bytes.",
                  "# steps etc. are \"auto\": a short budget on a CPU, production quality on a GPU.",
                  "[stages.compress]", 'type = "ntc"', f"inputs = {ins}", "params = { bpp = 8.0 }",
                  "# require = { margin_db = 0 }   # fail a material that loses to BCn at equal bytes"]
        if "normal" in all_roles:
            lines += ["", "# Mip chains trained to render like the full-resolution map (a material without a",
                      "# normal map fails this stage); judged against box and Toksvig mips.",
                      "[stages.mips]", 'type = "mipmap"', f"inputs = {ins}"]
        if "albedo" in all_roles:
            lines += ["", "# Each material as a layered shader distilled into latent textures + a decoder MLP",
                      "# (needs albedo); judged against the uniform material (its mean parameters).",
                      "[stages.neural_material]", 'type = "neural_material"', f"inputs = {ins}",
                      'params = { quality = "production" }   # preview | production | final']
    if texture_assets:
        ins = inputs(texture_assets)
        lines += ["", "# Each texture as a small UV -> colour network; judged against BC7 at equal bytes.",
                  "[stages.texture]", 'type = "neural_texture"', f"inputs = {ins}",
                  'params = { quality = "production" }',
                  "# require = { psnr_db = 18 }   # a texture below 18 dB fails the bake (exit 1)",
                  "", "# Each texture as a procedural shader program (noise, bricks, ... under a colour ramp);",
                  "# judged against BC7 at the program's bytes. Slow on a CPU: remove it if you do not need it.",
                  "[stages.procedural]", 'type = "procedural"', f"inputs = {ins}"]
    return "\n".join(lines) + "\n"


def init(root: Path, target: Path, *, force: bool = False) -> tuple[Path, Found]:
    """Writes ``target`` (refusing to replace one unless ``force``) and checks that it loads."""
    from bakery.formats.publish import write_atomic
    from bakery.pipeline.config import load_pipeline

    if target.exists() and not force:
        raise UsageError("exists; bakery init never replaces a pipeline (--force to overwrite it)",
                         where=str(target))
    found = find_assets(root)
    write_atomic(target, pipeline_text(root, found).encode())
    load_pipeline(target)  # what it wrote must load: a bug here is ours, said at once
    return target, found
