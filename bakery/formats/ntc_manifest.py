"""The ``ntc`` object of an NTC bundle's manifest (docs/FORMAT.md section 9), checked once.

Everything a loader takes from it becomes a file name, an array size or an index:
``material.channels`` roles name the files ``bakery decompress`` writes, ``files`` names
what it reads, ``latents`` sizes the arrays it allocates. The bundle reader calls
:func:`check_ntc` so that ``verify``, ``inspect`` and ``decompress`` refuse the same
bundles, and decompress then uses the returned :class:`NtcRecord` rather than the raw
manifest.
"""

from __future__ import annotations

from dataclasses import dataclass

from bakery.formats.errors import BundleError

#: Largest colour mip 0 a loader decodes (the image readers' limit, docs/PIPELINE.md).
MAX_SIDE = 16384
MAX_CHANNELS = 16
LATENT_FILES = ("latents.bin", "latents.dds")


@dataclass(frozen=True)
class NtcRecord:
    """The validated fields of an ``ntc`` manifest object that a decoder uses."""

    roles: tuple[str, ...]
    channels: dict[str, tuple[int, int]]  # role -> (first channel, count)
    normal_channel: int
    latents_file: str
    grid: object  # bakery.stages.ntc.texture_set.LatentGridSpec


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_ntc(ntc, listed: set[str], where: str, n_outputs: int | None) -> NtcRecord:
    """Validates ``manifest["ntc"]`` against the role table, the bundle's listed files and
    the decoder's output count; one :class:`BundleError` line naming the key otherwise."""
    from bakery.materials import ROLES

    def bad(key: str, message: str) -> BundleError:
        return BundleError(f"manifest 'ntc.{key}' {message}", where=where)

    if not isinstance(ntc, dict):
        raise BundleError("manifest 'ntc' should be an object", where=where)
    material, files, latents = ntc.get("material"), ntc.get("files"), ntc.get("latents")
    for key, value in (("material", material), ("files", files), ("latents", latents)):
        if not isinstance(value, dict):
            raise bad(key, "is missing or not an object")
    channels = material.get("channels")
    if not isinstance(channels, dict) or not channels:
        raise bad("material.channels", "should be a non-empty object of role -> [first channel, count]")
    slices: dict[str, tuple[int, int]] = {}
    for role, span in channels.items():
        if role not in ROLES:
            raise bad("material.channels", f"names {role!r}, which is not a material role "
                                           f"(known: {', '.join(ROLES)})")
        if not (isinstance(span, list) and len(span) == 2 and all(_is_int(v) for v in span)):
            raise bad(f"material.channels.{role}", "should be [first channel, count] (integers)")
        first, count = span
        if first < 0 or count < 1 or count > 4 or first + count > MAX_CHANNELS \
                or (n_outputs is not None and first + count > n_outputs):
            raise bad(f"material.channels.{role}", f"{span} lies outside the decoder's "
                                                   f"{n_outputs if n_outputs is not None else MAX_CHANNELS} outputs")
        slices[role] = (first, count)
    normal = material.get("normal_channel", -1)
    if not _is_int(normal) or normal != (slices["normal"][0] if "normal" in slices else -1):
        raise bad("material.normal_channel", "should be the normal role's first channel (or -1 without one)")
    if "normal" in slices and slices["normal"][1] != 3:
        raise bad("material.channels.normal", "should hold 3 channels")
    name = files.get("latents")
    if name not in LATENT_FILES or name not in listed:
        raise bad("files.latents", f"is {name!r}; it must be one of {', '.join(LATENT_FILES)}, listed in 'files'")
    grid = _grid(latents, bad)
    if (grid.mode == "packed") != (name == "latents.bin"):
        raise bad("files.latents", f"{name!r} does not hold {grid.mode!r} latents")
    return NtcRecord(tuple(slices), slices, normal, name, grid)


_GRID_INTS = {"width": (1, MAX_SIDE), "height": (1, MAX_SIDE), "grid_width": (1, MAX_SIDE),
              "grid_height": (1, MAX_SIDE), "features": (4, 64), "bits": (1, 8), "pe_octaves": (0, 16)}


def _grid(latents: dict, bad):
    from bakery.stages.ntc.texture_set import LatentGridSpec

    for key, (lo, hi) in _GRID_INTS.items():
        v = latents.get(key)
        if not _is_int(v) or not lo <= v <= hi:
            raise bad(f"latents.{key}", f"is {v!r}; expected an integer in [{lo}, {hi}]")
    if not isinstance(latents.get("mips"), bool) or latents.get("mode") not in ("packed", "bc"):
        raise bad("latents", "needs boolean 'mips' and 'mode' 'packed' or 'bc'")
    if latents["grid_width"] > latents["width"] or latents["grid_height"] > latents["height"]:
        raise bad("latents", "has a latent grid larger than the texture")
    try:
        return LatentGridSpec.from_dict(latents)
    except (ValueError, TypeError) as e:
        raise bad("latents", f"is not a valid latent grid ({e})") from None
