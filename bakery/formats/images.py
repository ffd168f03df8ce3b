"""Source image reading and preview writing: PNG (8/16-bit), JPEG, TGA, TIFF through
Pillow; OpenEXR (height and displacement maps) through the OpenEXR library."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from bakery.errors import UsageError
from bakery.imaging import to_uint8

_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}
#: The largest side any GPU API accepts for a 2D texture (D3D12, Vulkan's common limit):
#: a header claiming more is a mistake or a decompression bomb, refused before decoding.
MAX_SIDE = 16384
#: Pillow decodes 16-bit colour PNGs and uncompressed TIFFs to 8 bits; these raw modes
#: keep the samples, decoded twice (high then low byte) through the same unfiltering.
_PNG16 = {f"{mode};16{order}": mode for mode in ("RGB", "RGBA") for order in "BLN"}


def load_image(path: str | Path, *, key: str | None = None) -> np.ndarray:
    """Reads an 8/16-bit image as float32 [H, W, C] in [0, 1] (storage space, no sRGB decode),
    or a 32-bit float one as its values.

    Raises a one-line :class:`UsageError` naming the file for a missing or unreadable file.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise UsageError("file not found", where=str(path), key=key)
    if path.suffix.lower() == ".exr":
        return _load_exr(path, key)
    try:
        with Image.open(path) as im:
            if im.width > MAX_SIDE or im.height > MAX_SIDE:
                raise UsageError(f"image is {im.width}x{im.height}; bakery reads at most {MAX_SIDE} per side",
                                 where=str(path), key=key)
            if _png16_rawmode(im):
                return _load_png16(path)
            im.load()
            if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
                return _load_wide_grey(im, path, key)
            if im.mode not in _MODES:
                im = im.convert("RGBA" if "A" in im.getbands() else "RGB")
            a = np.asarray(im, dtype=np.float32) / 255.0
    except Image.DecompressionBombError as e:
        raise UsageError(f"refused: {e}", where=str(path), key=key) from None
    except UnidentifiedImageError as e:
        if path.suffix.lower() in _UNREAD:
            raise UsageError(f"{_UNREAD[path.suffix.lower()]} images are not read by bakery; convert it to a 16-bit "
                             "PNG, a 32-bit float TIFF or an OpenEXR file", where=str(path), key=key) from None
        raise UsageError(f"cannot read image ({type(e).__name__}: {e})", where=str(path), key=key) from None
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read image ({type(e).__name__}: {e})", where=str(path), key=key) from None
    if a.ndim == 2:
        a = a[:, :, None]
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise UsageError("image is empty", where=str(path), key=key)
    return np.ascontiguousarray(a)


#: OpenEXR channel names in the order bakery stacks them (a single channel of another name,
#: such as ``Y`` or ``Z``, reads as one grey channel).
_EXR_ORDER = ("R", "G", "B", "A")


def _load_exr(path: Path, key: str | None) -> np.ndarray:
    """An OpenEXR image as float32 [H, W, C]: its values as stored (a height map in
    metres stays in metres), RGBA channels in that order or its one channel."""
    import OpenEXR

    try:
        with OpenEXR.File(str(path), separate_channels=True) as f:
            channels = {name: np.asarray(c.pixels, np.float32) for name, c in f.channels().items()}
    except Exception as e:  # the binding raises plain Exceptions for damaged files
        raise UsageError(f"cannot read OpenEXR image ({type(e).__name__}: {e})", where=str(path), key=key) from None
    names = [n for n in _EXR_ORDER if n in channels] or sorted(channels)[:1]
    if not names:
        raise UsageError("OpenEXR image has no channels", where=str(path), key=key)
    a = np.stack([channels[n] for n in names], -1)
    if a.shape[0] > MAX_SIDE or a.shape[1] > MAX_SIDE:
        raise UsageError(f"image is {a.shape[1]}x{a.shape[0]}; bakery reads at most {MAX_SIDE} per side",
                         where=str(path), key=key)
    if not np.isfinite(a).all():
        raise UsageError("OpenEXR image holds non-finite values (inf or NaN)", where=str(path), key=key)
    return np.ascontiguousarray(a)


def _exr_size(path: Path, key: str | None) -> tuple[int, int]:
    import OpenEXR

    try:
        (x0, y0), (x1, y1) = OpenEXR.File(str(path), header_only=True).header()["dataWindow"]
    except Exception as e:  # the binding raises plain Exceptions for damaged files
        raise UsageError(f"cannot read OpenEXR image ({type(e).__name__}: {e})", where=str(path), key=key) from None
    return int(x1 - x0 + 1), int(y1 - y0 + 1)


def image_size(path: str | Path, *, key: str | None = None) -> tuple[int, int]:
    """``(width, height)`` of an image from its header alone (the planner sizes presets
    by it without decoding); the same one-line errors as :func:`load_image`."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise UsageError("file not found", where=str(path), key=key)
    if path.suffix.lower() == ".exr":
        return _exr_size(path, key)
    try:
        with Image.open(path) as im:
            return im.width, im.height
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise UsageError(f"cannot read image ({type(e).__name__}: {e})", where=str(path), key=key) from None


#: Formats Pillow cannot decode: refused by name rather than as an unknown file.
_UNREAD = {".hdr": "Radiance HDR"}


def _load_wide_grey(im, path: Path, key: str | None) -> np.ndarray:
    """A one-channel image of more than 8 bits, as its values: 16-bit integers scaled to
    [0, 1]; 32-bit floats unchanged (a height or mask map authored in floats; converting
    through 8 bits would turn [0, 1] into black). 32-bit integers beyond 16 bits and
    non-finite floats are refused: there is no reading of them that is not a guess."""
    a = np.asarray(im)
    if im.mode == "F":
        a = a.astype(np.float32)
        if not np.isfinite(a).all():
            raise UsageError("32-bit float image holds NaN or infinite values", where=str(path), key=key)
        return np.ascontiguousarray(a[:, :, None])
    if a.size and (int(a.min()) < 0 or int(a.max()) > 65535):
        raise UsageError(f"32-bit integer samples in [{int(a.min())}, {int(a.max())}]; bakery reads 8/16-bit integer "
                         "or 32-bit float images", where=str(path), key=key)
    return np.ascontiguousarray((a.astype(np.float32) / 65535.0)[:, :, None])


def _png16_rawmode(im) -> str | None:
    """The raw mode of a 16-bit colour PNG or uncompressed TIFF (which Pillow would cut to
    8 bits), else None. A 16-bit colour TIFF Pillow decodes otherwise (compressed) is
    refused: its samples would lose their low byte."""
    if im.format not in ("PNG", "TIFF") or not im.tile:
        return None
    raws = {(t.codec_name, t.args[0] if isinstance(t.args, tuple) else t.args) for t in im.tile}
    if len(raws) == 1 and next(iter(raws)) in {("zip" if im.format == "PNG" else "raw", r) for r in _PNG16}:
        return next(iter(raws))[1]
    bits = im.tag_v2.get(258, (8,)) if im.format == "TIFF" else (8,)
    if max(bits if isinstance(bits, tuple) else (bits,)) > 8 and im.mode in ("RGB", "RGBA"):
        raise UsageError(f"a {max(bits)}-bit colour TIFF that is compressed cannot be read at full precision; "
                         "save it uncompressed or as a 16-bit PNG", where=im.filename or None)
    return None


def _load_png16(path: Path) -> np.ndarray:
    """A 16-bit RGB or RGBA PNG or uncompressed TIFF at full precision, as float32 in [0, 1]."""
    from PIL import Image

    import sys

    halves = []
    with Image.open(path) as im:
        own = _png16_rawmode(im)[-1]
    own = {"N": "L" if sys.byteorder == "little" else "B"}.get(own, own)
    # decoded in the file's own byte order: the high bytes; in the other: the low ones
    for order in (own, "L" if own == "B" else "B"):
        with Image.open(path) as im:
            def swap(tile):
                args = tile.args
                raw = (args[0] if isinstance(args, tuple) else args)[:-1] + order
                return tile._replace(args=(raw, *args[1:]) if isinstance(args, tuple) else raw)
            im.tile = [swap(t) for t in im.tile]
            im.load()
            halves.append(np.asarray(im, dtype=np.uint16))
    a = (halves[0] << 8 | halves[1]).astype(np.float32) / 65535.0
    return np.ascontiguousarray(a if a.ndim == 3 else a[:, :, None])


#: zlib level of every PNG a bake writes (previews, references, baselines: no engine holds
#: them, and a bake writes them again each time; an ntc task at 2048² writes 18). Level 6
#: took 4x the time for 15% fewer bytes (a 2048² albedo: 1.30 s and 5.78 MB, against 0.32 s
#: and 6.83 MB at level 1), most of a library bake's encoding on busy cores.
PNG_LEVEL = 1


def encode_png(image: np.ndarray) -> bytes:
    """PNG bytes of a float [H, W, C] image; deterministic (no timestamps, fixed zlib level)."""
    from PIL import Image

    a = to_uint8(image)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", compress_level=PNG_LEVEL)
    return buf.getvalue()
