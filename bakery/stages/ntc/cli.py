"""``bakery decompress BUNDLE -o DIR``: an NTC bundle back to ordinary textures (as
ntc-cli's decompress does), through the CPU reference decoder: no GPU needed.

``--format png`` writes ``{name}.png`` (mip 0) and ``{name}_mip{L}.png``; ``--format dds``
writes ``{name}.dds`` in the texture's BCn format with the whole mip chain. Names and
packing follow ``--layout`` (bakery.layouts: one texture per role, or packed as glTF,
Unreal or Unity HDRP import them, normals in that engine's convention unless
``--normal-convention`` says otherwise). A bad bundle or one that is not from the
``ntc`` stage ends with exit code 2 and one line. DIR follows ``bakery run -o``'s rule: a
new or empty folder, or one an earlier decompress wrote (its ``.bakery-decompress.json``
names the files it may replace); ``--force`` writes into any other folder but never
replaces a source asset of a pipeline found above DIR.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import numpy as np

from bakery.errors import EXIT_USAGE
from bakery.layouts import LAYOUTS
from bakery.materials import NORMAL_CONVENTIONS


def decompress_bundle(bundle: Path, mips: bool = True) -> tuple[list[str], list[dict[str, np.ndarray]]]:
    """(roles, per colour mip {role: image in [0, 1]}) of an NTC bundle. Every name and
    size comes from the reader's checked ``ntc`` record (roles from the role table, the
    latent file among the listed, hashed files), never from the raw manifest."""
    from bakery.formats.errors import BundleError
    from bakery.formats.reader import read_bundle
    from bakery.materials import renormalize_normals
    from bakery.stages.ntc.decode import decode_image, latent_values

    b = read_bundle(bundle)
    stage = b.manifest["stage"]["type"]
    if stage != "ntc" or b.ntc is None:
        raise click.UsageError(f"{bundle}: not an ntc bundle (stage {stage!r})")
    grid, levels = latent_values(b)
    if b.network is None or b.network.n_inputs != grid.n_inputs:
        raise BundleError(f"the decoder network takes {b.network.n_inputs if b.network else 'no'} inputs, the latent "
                          f"grid gives {grid.n_inputs}", where=str(b.path / "manifest.json"))
    out = []
    for m in range(len(grid.color_mips) if mips else 1):
        img = renormalize_normals(decode_image(grid, levels, b.network, b.params, m), b.ntc.normal_channel)
        img = np.clip(img, 0.0, 1.0)
        out.append({r: img[..., a:a + n] for r, (a, n) in b.ntc.channels.items()})
    return list(b.ntc.roles), out


def output_names(names: list[str], mip_count: int, fmt: str) -> list[str]:
    """The files decompress writes for these textures (names from the role table or the layout)."""
    if fmt == "dds":
        return [f"{n}.dds" for n in names]
    return [f"{n}.png" if m == 0 else f"{n}_mip{m}.png" for m in range(mip_count) for n in names]


@click.command("decompress")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path), help="output folder")
@click.option("--format", "fmt", type=click.Choice(["png", "dds"]), default="png", show_default=True)
@click.option("--mips/--no-mips", default=True, show_default=True, help="every mip level, or mip 0 only")
@click.option("--layout", type=click.Choice(LAYOUTS), default="separate", show_default=True,
              help="one texture per role, or packed as that engine imports them")
@click.option("--normal-convention", type=click.Choice(NORMAL_CONVENTIONS), default=None,
              help="normal map convention written (default: the layout engine's; separate: gl)")
@click.option("--force", is_flag=True,
              help="Write into a folder holding other files, replacing same-named ones (never a pipeline's "
                   "source asset).")
@click.pass_context
def decompress_cmd(ctx: click.Context, bundle: Path, out_dir: Path, fmt: str, mips: bool, layout: str,
                   normal_convention: str | None, force: bool) -> None:
    """Decode an ntc BUNDLE to PNGs or BCn DDS files (with mips) in DIR.

    DIR must be new, empty or an earlier decompress's (whose files alone are replaced)."""
    from bakery.formats.errors import BundleError
    from bakery.formats.publish import make_staging_dir, stale_staging
    from bakery.layouts import pack
    from bakery.pipeline.safety import check_decompress_target, sigterm_as_interrupt

    try:
        _, decoded = decompress_bundle(bundle, mips)
    except (BundleError, click.UsageError) as e:
        click.echo(f"error: {e.format_message() if isinstance(e, click.UsageError) else e}", err=True)
        ctx.exit(EXIT_USAGE)
        return
    levels = [pack(images, layout, normal_convention=normal_convention) for images in decoded]
    names = list(levels[0])
    files = output_names(names, len(levels), fmt)
    check_decompress_target(out_dir, files, force=force)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in stale_staging(out_dir.parent, out_dir.name):  # a killed earlier decompress's
        shutil.rmtree(stale, ignore_errors=True)
    with sigterm_as_interrupt():  # SIGTERM cleans up like Ctrl-C
        _write_outputs(out_dir, make_staging_dir(out_dir), levels, names, files, fmt)
    click.echo(f"decompress: wrote {len(levels)} mip level(s) of {', '.join(names)} to {out_dir}")


def _write_outputs(out_dir: Path, staging: Path, levels, names: list[str], files: list[str], fmt: str) -> None:
    """Encodes every file in ``staging``, then moves them into ``out_dir`` by renames."""
    from bakery.formats.images import encode_png
    from bakery.formats.publish import write_atomic
    from bakery.pipeline.safety import DECOMPRESS_MARKER, decompressed_names

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
        ours = sorted((decompressed_names(out_dir) or set()) | set(files))
        # The marker first: a kill between the renames leaves every written file claimed.
        write_atomic(out_dir / DECOMPRESS_MARKER, json.dumps(
            {"written_by": "bakery decompress", "files": ours}, indent=1).encode() + b"\n")
        for name in files:
            (staging / name).replace(out_dir / name)  # a rename: replaces a name, never follows a link
    finally:
        shutil.rmtree(staging, ignore_errors=True)
