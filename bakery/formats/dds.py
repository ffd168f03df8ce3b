"""DDS with the DX10 extension header: what Unreal, D3D12 loaders and texconv read.

Layout: ``"DDS "``, the 124-byte DDS_HEADER, the 20-byte DDS_HEADER_DXT10, then the
surfaces: for each array layer, its mips from largest to smallest, tightly packed.
"""

from __future__ import annotations

import struct

from bakery.formats.errors import BundleError
from bakery.formats.texture import BY_DXGI, Texture, mip_size

MAGIC = b"DDS "
HEADER = struct.Struct("<4s7I11I8I5I")   # magic, header (size..mipcount), reserved1, pixelformat, caps..reserved2
DX10 = struct.Struct("<5I")              # dxgiFormat, resourceDimension, miscFlag, arraySize, miscFlags2

DDSD_CAPS, DDSD_HEIGHT, DDSD_WIDTH, DDSD_PITCH = 0x1, 0x2, 0x4, 0x8
DDSD_PIXELFORMAT, DDSD_MIPMAPCOUNT, DDSD_LINEARSIZE = 0x1000, 0x20000, 0x80000
DDPF_FOURCC = 0x4
DDSCAPS_COMPLEX, DDSCAPS_TEXTURE, DDSCAPS_MIPMAP = 0x8, 0x1000, 0x400000
D3D10_RESOURCE_DIMENSION_TEXTURE2D = 3
DATA_OFFSET = HEADER.size + DX10.size    # 148


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
    header = HEADER.pack(MAGIC, 124, flags, tex.height, tex.width, pitch, 0, tex.level_count, *([0] * 11),
                         32, DDPF_FOURCC, int.from_bytes(b"DX10", "little"), 0, 0, 0, 0, 0,
                         caps, 0, 0, 0, 0)
    dx10 = DX10.pack(fmt.dxgi, D3D10_RESOURCE_DIMENSION_TEXTURE2D, 0, tex.layer_count, 0)
    body = b"".join(tex.levels[m][layer] for layer in range(tex.layer_count) for m in range(tex.level_count))
    return header + dx10 + body


def read_dds(data: bytes, *, where: str = "texture.dds") -> Texture:
    """Parses a DX10 DDS written by :func:`write_dds`; anything else raises :class:`BundleError`."""
    def bad(msg: str):
        return BundleError(msg, where=where)

    if len(data) < DATA_OFFSET:
        raise bad(f"truncated: {len(data)} bytes, DDS+DX10 headers need {DATA_OFFSET}")
    h = HEADER.unpack_from(data, 0)
    magic, size, _flags, height, width, _pitch, depth, mips = h[:8]
    pf_size, pf_flags, fourcc = h[19:22]
    if magic != MAGIC:
        raise bad(f"wrong magic {magic!r}, expected {MAGIC!r}")
    if size != 124 or pf_size != 32:
        raise bad(f"bad header sizes {size}/{pf_size}, expected 124/32")
    if not pf_flags & DDPF_FOURCC or fourcc != int.from_bytes(b"DX10", "little"):
        raise bad("no DX10 extension header (legacy DDS is not a bakery output)")
    dxgi, dim, misc, array_size, _misc2 = DX10.unpack_from(data, HEADER.size)
    if dxgi not in BY_DXGI:
        raise bad(f"unsupported DXGI format {dxgi}")
    if dim != D3D10_RESOURCE_DIMENSION_TEXTURE2D or misc != 0 or depth > 1:
        raise bad(f"not a plain 2D texture (dimension {dim}, misc {misc}, depth {depth})")
    if not (1 <= width <= 65536 and 1 <= height <= 65536 and 1 <= array_size <= 65536):
        raise bad(f"implausible size {width}x{height}x{array_size}")
    mips = max(mips, 1)
    if mips > max(width, height).bit_length():
        raise bad(f"{mips} mip levels for {width}x{height}")
    fmt = BY_DXGI[dxgi]
    sizes = [fmt.level_bytes(mip_size(width, m), mip_size(height, m)) for m in range(mips)]
    need = DATA_OFFSET + array_size * sum(sizes)
    if len(data) != need:
        raise bad(f"size mismatch: {len(data)} bytes, {fmt.name} {width}x{height} x{array_size} "
                  f"with {mips} mips needs {need}")
    surfaces = [[b""] * array_size for _ in range(mips)]
    pos = DATA_OFFSET
    for layer in range(array_size):
        for m in range(mips):
            surfaces[m][layer] = bytes(data[pos:pos + sizes[m]])
            pos += sizes[m]
    return Texture(fmt, width, height, tuple(tuple(s) for s in surfaces), is_array=array_size > 1)
