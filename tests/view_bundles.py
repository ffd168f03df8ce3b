"""Tiny bundles of the kinds `bakery view` draws, baked through the CLI into one out/
folder (<stage>/<asset>/), for the browser tests."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from bakery.cli import main
from bakery.formats.images import encode_png, load_image

ROOT = Path(__file__).resolve().parent.parent

#: stage name -> (type, asset source, params): cheap on lavapipe (a few seconds each).
TINY = {
    "compress": ("ntc", "material", ["bpp=14", "steps=30", "batch=1024", "hidden=16", "layers=1"]),
    "compress_bc": ("ntc", "material", ["bpp=14", "steps=10", "batch=1024", "hidden=16", "layers=1", "latents=bc",
                                        "bc_refresh=5", "baseline=false"]),
    "neural_material": ("neural_material", "material", ["steps=20", "batch=256", "hidden=8", "encoder_hidden=8",
                                                        "eval_directions=4", "finetune_steps=0"]),
    "mips": ("mipmap", "material", ["steps=10", "pairs=2", "eval_pairs=4"]),
    "texture": ("neural_texture", "texture", ["steps=30", "batch=1024", "width=16", "layers=1"]),
}


def make_material(folder: Path, width: int = 64, height: int = 32) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted((ROOT / "assets" / "materials" / "bricks").glob("*.png")):
        (folder / f.name).write_bytes(encode_png(load_image(f)[:height, :width]))
    return folder


def make_texture(path: Path, size: int = 32) -> Path:
    src = sorted((ROOT / "assets" / "textures").glob("*.png"))[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_png(load_image(src)[:size, :size]))
    return path


def bake(root: Path, stages=tuple(TINY)) -> Path:
    """out/<stage>/bricks (or /rust) for each stage named; returns out/."""
    sources = {"material": make_material(root / "src" / "bricks"), "texture": make_texture(root / "src" / "rust.png")}
    out = root / "out"
    for name in stages:
        kind, source, params = TINY[name]
        asset = "bricks" if source == "material" else "rust"
        args = ["run", kind, str(sources[source]), "-o", str(out / name / asset), "--seed", "3"]
        for p in params:
            args += ["--param", p]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
    return out
