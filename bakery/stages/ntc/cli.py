"""``bakery decompress BUNDLE -o DIR``: an NTC bundle back to ordinary textures (as
ntc-cli's decompress does), through the CPU reference decoder: no GPU needed.

``--format png`` writes ``{name}.png`` (mip 0) and ``{name}_mip{L}.png``; ``--format dds``
writes ``{name}.dds`` in the texture's BCn format with the whole mip chain. Names and
packing follow ``--layout`` (bakery.layouts: one texture per role, or packed as glTF,
Unreal or Unity HDRP import them, normals in that engine's convention unless
``--normal-convention`` says otherwise). A bad bundle or one that is not from the
``ntc`` stage ends with exit code 2 and one line.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click
import numpy as np

from bakery.errors import EXIT_USAGE
from bakery.layouts import LAYOUTS
from bakery.materials import NORMAL_CONVENTIONS


def decompress_bundle(bundle: Path, mips: bool = True) -> tuple[list[str], list[dict[str, np.ndarray]]]:
    """(roles, per colour mip {role: image in [0, 1]}) of an NTC bundle."""
    from bakery.formats.reader import read_bundle
    from bakery.materials import renormalize_normals
    from bakery.stages.ntc.decode import decode_image, latent_values

    b = read_bundle(bundle)
    if b.manifest.get("stage", {}).get("type") != "ntc" or "ntc" not in b.manifest:
        raise click.UsageError(f"{bundle}: not an ntc bundle (stage {b.manifest.get('stage', {}).get('type')!r})")
    grid, levels = latent_values(bundle, b.manifest)
    mat = b.manifest["ntc"]["material"]
    out = []
    for m in range(len(grid.color_mips) if mips else 1):
        img = renormalize_normals(decode_image(grid, levels, b.network, b.params, m), mat["normal_channel"])
        img = np.clip(img, 0.0, 1.0)
        out.append({r: img[..., a:a + n] for r, (a, n) in mat["channels"].items()})
    return list(mat["channels"]), out


@click.command("decompress")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path), help="output folder")
@click.option("--format", "fmt", type=click.Choice(["png", "dds"]), default="png", show_default=True)
@click.option("--mips/--no-mips", default=True, show_default=True, help="every mip level, or mip 0 only")
@click.option("--layout", type=click.Choice(LAYOUTS), default="separate", show_default=True,
              help="one texture per role, or packed as that engine imports them")
@click.option("--normal-convention", type=click.Choice(NORMAL_CONVENTIONS), default=None,
              help="normal map convention written (default: the layout engine's; separate: gl)")
@click.pass_context
def decompress_cmd(ctx: click.Context, bundle: Path, out_dir: Path, fmt: str, mips: bool, layout: str,
                   normal_convention: str | None) -> None:
    """Decode an ntc BUNDLE to PNGs or BCn DDS files (with mips) in DIR."""
    from bakery.formats.errors import BundleError
    from bakery.formats.images import encode_png
    from bakery.layouts import pack

    try:
        _, decoded = decompress_bundle(bundle, mips)
    except (BundleError, click.UsageError) as e:
        click.echo(f"error: {e.format_message() if isinstance(e, click.UsageError) else e}", err=True)
        ctx.exit(EXIT_USAGE)
        return
    levels = [pack(images, layout, normal_convention=normal_convention) for images in decoded]
    names = list(levels[0])
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        if fmt == "png":
            for m, images in enumerate(levels):
                for name, (img, _) in images.items():
                    (staging / (f"{name}.png" if m == 0 else f"{name}_mip{m}.png")).write_bytes(encode_png(img))
        else:
            from bakery.baselines.transcode import transcode_to_bcn
            from bakery.formats.dds import write_dds
            from bakery.formats.texture import make_texture

            for name in names:   # BCn by what the texture holds: its role's format, or by channel count
                kind = levels[0][name][1] or "packed"
                per_mip = [transcode_to_bcn({kind: images[name][0]})[kind] for images in levels]
                f, _, w, h = per_mip[0]
                tex = make_texture(f, [p[1] for p in per_mip], width=w, height=h)
                (staging / f"{name}.dds").write_bytes(write_dds(tex))
        out_dir.mkdir(parents=True, exist_ok=True)
        for p in sorted(staging.iterdir()):
            p.replace(out_dir / p.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    click.echo(f"decompress: wrote {len(levels)} mip level(s) of {', '.join(names)} to {out_dir}")
