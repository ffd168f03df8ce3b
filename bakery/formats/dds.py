"""DDS: a legacy header where the format allows one, the DX10 extension where it must.

Layout: ``"DDS "``, the 124-byte DDS_HEADER, for DX10 files the 20-byte DDS_HEADER_DXT10,
then the surfaces: for each array layer, its mips from largest to smallest, tightly
packed. A single-layer RGBA8 or BC1/BC4/BC5 texture gets the legacy header (a pixel
format with RGB masks or a FourCC), which every DDS tool reads (ImageMagick, NVIDIA
Texture Tools, Pillow, old engines); arrays, sRGB, BC7 and float formats need DX10.
The reader takes both.
"""

from __future__ import annotations

import struct

from bakery.formats.errors import BundleError
from bakery.formats.texture import BY_DXGI, Texture
from bakery.imaging import mip_size

MAGIC = b"DDS "
HEADER = struct.Struct("<4s7I11I8I5I")   # magic, header (size..mipcount), reserved1, pixelformat, caps..reserved2
DX10 = struct.Struct("<5I")              # dxgiFormat, resourceDimension, miscFlag, arraySize, miscFlags2

DDSD_CAPS, DDSD_HEIGHT, DDSD_WIDTH, DDSD_PITCH = 0x1, 0x2, 0x4, 0x8
DDSD_PIXELFORMAT, DDSD_MIPMAPCOUNT, DDSD_LINEARSIZE = 0x1000, 0x20000, 0x80000
DDPF_ALPHAPIXELS, DDPF_FOURCC, DDPF_RGB = 0x1, 0x4, 0x40
DDSCAPS_COMPLEX, DDSCAPS_TEXTURE, DDSCAPS_MIPMAP = 0x8, 0x1000, 0x400000
D3D10_RESOURCE_DIMENSION_TEXTURE2D = 3
DATA_OFFSET = HEADER.size + DX10.size    # 148
LEGACY_DATA_OFFSET = HEADER.size         # 128
FOURCC_DX10 = int.from_bytes(b"DX10", "little")
#: Formats with a legacy pixel format: (flags, fourcc, bit count, R, G, B, A masks).
_RGBA8 = (DDPF_RGB | DDPF_ALPHAPIXELS, 0, 32, 0x000000FF, 0x0000FF00, 0x00FF0000, 0xFF000000)
LEGACY = {
    "rgba8_unorm": _RGBA8,
    "bc1_unorm": (DDPF_FOURCC, int.from_bytes(b"DXT1", "little"), 0, 0, 0, 0, 0),
    "bc4_unorm": (DDPF_FOURCC, int.from_bytes(b"BC4U", "little"), 0, 0, 0, 0, 0),
    "bc5_unorm": (DDPF_FOURCC, int.from_bytes(b"BC5U", "little"), 0, 0, 0, 0, 0),
}
#: FourCCs other writers use for the same formats, read too.
_LEGACY_ALIASES = {int.from_bytes(b"ATI1", "little"): "bc4_unorm", int.from_bytes(b"ATI2", "little"): "bc5_unorm"}


def uses_legacy_header(tex: Texture) -> bool:
    """Whether ``tex`` is written with a legacy header: one layer of a format it can name."""
    return tex.format.name in LEGACY and not tex.is_array and tex.layer_count == 1


def write_dds(tex: Texture) -> bytes:
    """DDS bytes of a checked texture (deterministic: no writer tags, zero reserved fields)."""
    tex.check()
    fmt = tex.format
    flags = DDSD_CAPS | DDSD_HEIGHT | DDSD_WIDTH | DDSD_PIXELFORMAT | DDSD_MIPMAPCOUNT
    if fmt.compressed:
        flags |= DDSD_LINEARSIZE
        pitch = fmt.level_bytes(tex.width, tex.height)
    else:
        flags |= DDSD_PITCH
        pitch = tex.width * fmt.block_bytes
    caps = DDSCAPS_TEXTURE
    if tex.level_count > 1:
        caps |= DDSCAPS_COMPLEX | DDSCAPS_MIPMAP
    if tex.layer_count > 1:
        caps |= DDSCAPS_COMPLEX
    legacy = uses_legacy_header(tex)
    pixel_format = LEGACY[fmt.name] if legacy else (DDPF_FOURCC, FOURCC_DX10, 0, 0, 0, 0, 0)
    header = HEADER.pack(MAGIC, 124, flags, tex.height, tex.width, pitch, 0, tex.level_count, *([0] * 11),
                         32, *pixel_format, caps, 0, 0, 0, 0)
    dx10 = b"" if legacy else DX10.pack(fmt.dxgi, D3D10_RESOURCE_DIMENSION_TEXTURE2D, 0, tex.layer_count, 0)
    body = b"".join(tex.levels[m][layer] for layer in range(tex.layer_count) for m in range(tex.level_count))
    return header + dx10 + body


def read_dds(data: bytes, *, where: str = "texture.dds") -> Texture:
    """Parses a DDS as :func:`write_dds` writes it (legacy or DX10 header); anything else
    raises :class:`BundleError`."""
    def bad(msg: str):
        return BundleError(msg, where=where)

    if len(data) < LEGACY_DATA_OFFSET:
        raise bad(f"truncated: {len(data)} bytes, the DDS header needs {LEGACY_DATA_OFFSET}")
    h = HEADER.unpack_from(data, 0)
    magic, size, _flags, height, width, _pitch, depth, mips = h[:8]
    pf_size, pf_flags, fourcc = h[19:22]
    if magic != MAGIC:
        raise bad(f"wrong magic {magic!r}, expected {MAGIC!r}")
    if size != 124 or pf_size != 32:
        raise bad(f"bad header sizes {size}/{pf_size}, expected 124/32")
    if pf_flags & DDPF_FOURCC and fourcc == FOURCC_DX10:
        if len(data) < DATA_OFFSET:
            raise bad(f"truncated: {len(data)} bytes, DDS+DX10 headers need {DATA_OFFSET}")
        dxgi, dim, misc, array_size, _misc2 = DX10.unpack_from(data, HEADER.size)
        if dxgi not in BY_DXGI:
            raise bad(f"unsupported DXGI format {dxgi}")
        fmt, offset = BY_DXGI[dxgi], DATA_OFFSET
    else:
        fmt, dim, misc, array_size, offset = _legacy_format(h[20:27], bad), D3D10_RESOURCE_DIMENSION_TEXTURE2D, 0, 1, \
            LEGACY_DATA_OFFSET
    if dim != D3D10_RESOURCE_DIMENSION_TEXTURE2D or misc != 0 or depth > 1:
        raise bad(f"not a plain 2D texture (dimension {dim}, misc {misc}, depth {depth})")
    if not (1 <= width <= 65536 and 1 <= height <= 65536 and 1 <= array_size <= 65536):
        raise bad(f"implausible size {width}x{height}x{array_size}")
    mips = max(mips, 1)
    if mips > max(width, height).bit_length():
        raise bad(f"{mips} mip levels for {width}x{height}")
    sizes = [fmt.level_bytes(mip_size(width, m), mip_size(height, m)) for m in range(mips)]
    need = offset + array_size * sum(sizes)
    if len(data) != need:
        raise bad(f"size mismatch: {len(data)} bytes, {fmt.name} {width}x{height} x{array_size} "
                  f"with {mips} mips needs {need}")
    surfaces = [[b""] * array_size for _ in range(mips)]
    pos = offset
    for layer in range(array_size):
        for m in range(mips):
            surfaces[m][layer] = bytes(data[pos:pos + sizes[m]])
            pos += sizes[m]
    return Texture(fmt, width, height, tuple(tuple(s) for s in surfaces), is_array=array_size > 1)


def _legacy_format(pixel_format: tuple, bad):
    """Our format for a legacy DDS pixel format (flags, fourcc, bits, masks)."""
    from bakery.formats.texture import FORMATS

    flags, fourcc = pixel_format[:2]
    if flags & DDPF_FOURCC:
        for name, pf in LEGACY.items():
            if pf[0] == DDPF_FOURCC and pf[1] == fourcc:
                return FORMATS[name]
        if fourcc in _LEGACY_ALIASES:
            return FORMATS[_LEGACY_ALIASES[fourcc]]
        raise bad(f"unsupported legacy FourCC {fourcc.to_bytes(4, 'little')!r}")
    if tuple(pixel_format[2:]) == _RGBA8[2:] and flags & DDPF_RGB:
        return FORMATS["rgba8_unorm"]
    raise bad(f"unsupported legacy pixel format (flags {flags:#x}, {pixel_format[2]} bits)")
