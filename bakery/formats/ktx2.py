"""KTX 2.0 writer and reader (Khronos KTX 2.0 specification), supercompression 0 or 2.

Writes: the 80-byte header, the level index, a Data Format Descriptor with one basic
block, a ``KTXwriter`` key/value entry, then mip data from the smallest level to the
largest (as the spec requires).

- ``supercompression="none"`` (scheme 0): each level aligned to lcm(texel block bytes, 4).
- ``supercompression="zstd"`` (scheme 2, Zstandard): each level (all its layers) is one
  zstd frame of its own, with content size and checksum, at level :data:`ZSTD_LEVEL`;
  ``byteLength`` is the frame's size, ``uncompressedByteLength`` the raw size. Levels are
  packed without ``mipPadding`` (the spec requires it only for scheme 0), there is no
  supercompression global data, and the DFD is the one of the raw format. Needs the
  ``zstandard`` package, imported only when a zstd file is written or read.
"""

from __future__ import annotations

import math
import struct

import bakery
from bakery.formats.errors import BundleError
from bakery.formats.texture import BY_VK, PixelFormat, Texture
from bakery.imaging import mip_size

IDENTIFIER = b"\xabKTX 20\xbb\r\n\x1a\n"
HEADER = struct.Struct("<12s9I4I2Q")     # identifier, vkFormat..supercompression, dfd/kvd offsets+lengths, sgd
LEVEL = struct.Struct("<3Q")             # byteOffset, byteLength, uncompressedByteLength
SUPERCOMPRESSION_NONE = 0
SUPERCOMPRESSION_ZSTD = 2
#: Largest texel payload a reader holds (all levels and layers): a 16384² RGBA16F chain is
#: 2.7 GiB; a header asking for more is refused before anything is inflated or copied.
MAX_TEXTURE_BYTES = 3 << 30
SUPERCOMPRESSION = {"none": SUPERCOMPRESSION_NONE, "zstd": SUPERCOMPRESSION_ZSTD}
# Fixed, so equal textures give equal bytes (for one libzstd version); one thread, no dictionary.
ZSTD_LEVEL = 19

# Data Format Descriptor constants (Khronos Data Format Specification 1.3).
KHR_DF_VERSION = 2
MODEL_RGBSDA, MODEL_BC1A, MODEL_BC4, MODEL_BC5, MODEL_BC7 = 1, 128, 131, 132, 134
PRIMARIES_BT709 = 1
TRANSFER_LINEAR, TRANSFER_SRGB = 1, 2
CHANNEL_R, CHANNEL_G, CHANNEL_B, CHANNEL_A = 0, 1, 2, 15
QUAL_LINEAR, QUAL_SIGNED, QUAL_FLOAT = 0x10, 0x40, 0x80
FLOAT_ONE, FLOAT_MINUS_ONE = 0x3F800000, 0xBF800000

_BC_MODEL = {"bc1": MODEL_BC1A, "bc4": MODEL_BC4, "bc5": MODEL_BC5, "bc7": MODEL_BC7}


def _samples(fmt: PixelFormat) -> tuple[int, list[tuple[int, int, int, int, int]]]:
    """(colour model, [(bitOffset, bitLength, channelType, lower, upper)]) for a format."""
    if fmt.compressed:
        model = _BC_MODEL[fmt.name[:3]]
        bits = fmt.block_bytes * 8
        if fmt.name.startswith("bc5"):   # two 64-bit halves: red then green
            return model, [(0, 64, 0, 0, 0xFFFFFFFF), (64, 64, 1, 0, 0xFFFFFFFF)]
        return model, [(0, bits, 0, 0, 0xFFFFFFFF)]
    channels = [CHANNEL_R, CHANNEL_G, CHANNEL_B, CHANNEL_A][:fmt.channels]
    item_bits = fmt.block_bytes * 8 // fmt.channels
    out = []
    for i, ch in enumerate(channels):
        if fmt.numpy_dtype == "<f2":
            out.append((i * item_bits, item_bits, ch | QUAL_FLOAT | QUAL_SIGNED, FLOAT_MINUS_ONE, FLOAT_ONE))
        else:
            qual = QUAL_LINEAR if (fmt.srgb and ch == CHANNEL_A) else 0
            out.append((i * item_bits, item_bits, ch | qual, 0, (1 << item_bits) - 1))
    return MODEL_RGBSDA, out


def data_format_descriptor(fmt: PixelFormat) -> bytes:
    """The DFD (dfdTotalSize + one basic descriptor block) for ``fmt``."""
    model, samples = _samples(fmt)
    block_size = 24 + 16 * len(samples)
    transfer = TRANSFER_SRGB if fmt.srgb else TRANSFER_LINEAR
    dim = fmt.block - 1
    body = struct.pack("<IIBBBBBBBB8B", 0, KHR_DF_VERSION | (block_size << 16),
                       model, PRIMARIES_BT709, transfer, 0, dim, dim, 0, 0,
                       fmt.block_bytes, 0, 0, 0, 0, 0, 0, 0)
    for bit_offset, bit_length, channel_type, lower, upper in samples:
        body += struct.pack("<HBBIII", bit_offset, bit_length - 1, channel_type, 0, lower, upper)
    return struct.pack("<I", 4 + len(body)) + body


def _key_value_data() -> bytes:
    key, value = b"KTXwriter", f"bakery {bakery.__version__}".encode() + b"\0"
    entry = key + b"\0" + value
    out = struct.pack("<I", len(entry)) + entry
    return out + b"\0" * (-len(out) % 4)


def _type_size(fmt: PixelFormat) -> int:
    return 2 if fmt.numpy_dtype == "<f2" else 1


def _level_alignment(fmt: PixelFormat, scheme: int = SUPERCOMPRESSION_NONE) -> int:
    """Alignment of each level's byteOffset: lcm(texel block bytes, 4) unsupercompressed, else 1."""
    return math.lcm(fmt.block_bytes, 4) if scheme == SUPERCOMPRESSION_NONE else 1


#: Raw bytes from which a texture's levels compress on two threads: level 0 on one, the
#: others (a third of its size together) on the other. Each level is its own frame, so the
#: bytes do not change; zstd at level 19 takes seconds for 2K latents.
ZSTD_PARALLEL_FROM = 1 << 20


def _zstd_compress(raw: list[bytes]) -> list[bytes]:
    import zstandard

    def compress(levels: list[bytes]) -> list[bytes]:
        cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True,
                                        write_dict_id=False, threads=0)   # one per thread: not thread-safe
        return [cctx.compress(r) for r in levels]

    if len(raw) < 2 or sum(map(len, raw)) < ZSTD_PARALLEL_FROM:
        return compress(raw)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:   # python-zstandard releases the GIL
        rest = pool.submit(compress, raw[1:])
        first = compress(raw[:1])
        return first + rest.result()


def write_ktx2(tex: Texture, *, supercompression: str = "none") -> bytes:
    """KTX2 bytes of a checked texture; ``supercompression`` is ``"none"`` (scheme 0) or ``"zstd"`` (2)."""
    if supercompression not in SUPERCOMPRESSION:
        raise ValueError(f"unknown KTX2 supercompression {supercompression!r} (known: {', '.join(SUPERCOMPRESSION)})")
    scheme = SUPERCOMPRESSION[supercompression]
    tex.check()
    fmt = tex.format
    n = tex.level_count
    dfd = data_format_descriptor(fmt)
    kvd = _key_value_data()
    dfd_off = HEADER.size + n * LEVEL.size
    kvd_off = dfd_off + len(dfd)
    pos = kvd_off + len(kvd)
    align = _level_alignment(fmt, scheme)
    raw = [b"".join(tex.levels[m]) for m in range(n)]
    levels = _zstd_compress(raw) if scheme == SUPERCOMPRESSION_ZSTD else raw
    offsets = [0] * n
    body = bytearray()
    for m in reversed(range(n)):         # smallest mip first in the file
        pad = -(pos + len(body)) % align
        body += b"\0" * pad
        offsets[m] = pos + len(body)
        body += levels[m]
    header = HEADER.pack(IDENTIFIER, fmt.vk, _type_size(fmt), tex.width, tex.height, 0,
                         tex.layer_count if tex.is_array else 0, 1, n, scheme,
                         dfd_off, len(dfd), kvd_off, len(kvd), 0, 0)
    index = b"".join(LEVEL.pack(offsets[m], len(levels[m]), len(raw[m])) for m in range(n))
    return header + index + dfd + kvd + bytes(body)


def read_ktx2(data: bytes, *, where: str = "texture.ktx2") -> Texture:
    """Parses a KTX2 written by :func:`write_ktx2`; anything else raises :class:`BundleError`."""
    def bad(msg: str):
        return BundleError(msg, where=where)

    if len(data) < HEADER.size:
        raise bad(f"truncated: {len(data)} bytes, KTX2 header needs {HEADER.size}")
    (ident, vk, type_size, width, height, depth, layers, faces, n, scheme,
     dfd_off, dfd_len, kvd_off, kvd_len, sgd_off, sgd_len) = HEADER.unpack_from(data, 0)
    if ident != IDENTIFIER:
        raise bad("wrong identifier (not a KTX 2.0 file)")
    if vk not in BY_VK:
        raise bad(f"unsupported vkFormat {vk}")
    fmt = BY_VK[vk]
    if scheme not in (SUPERCOMPRESSION_NONE, SUPERCOMPRESSION_ZSTD):
        raise bad(f"supercompression scheme {scheme} is not supported (only 0, none, and 2, zstd)")
    if type_size != _type_size(fmt) or depth != 0 or faces != 1:
        raise bad(f"not a plain 2D {fmt.name} texture (typeSize {type_size}, depth {depth}, faces {faces})")
    if not (1 <= width <= 65536 and 1 <= height <= 65536 and layers <= 65536):
        raise bad(f"implausible size {width}x{height}x{layers}")
    if not 1 <= n <= max(width, height).bit_length():
        raise bad(f"{n} mip levels for {width}x{height}")
    index_end = HEADER.size + n * LEVEL.size
    if len(data) < index_end:
        raise bad("truncated level index")
    if dfd_off < index_end or dfd_off + dfd_len > len(data) or dfd_len < 28:
        raise bad("data format descriptor out of range")
    if bytes(data[dfd_off:dfd_off + dfd_len]) != data_format_descriptor(fmt):
        raise bad(f"data format descriptor does not describe {fmt.name}")
    if kvd_len and (kvd_off < dfd_off + dfd_len or kvd_off + kvd_len > len(data)):
        raise bad("key/value data out of range")
    if sgd_len or sgd_off:
        raise bad("unexpected supercompression global data")
    n_layers = max(layers, 1)
    align = _level_alignment(fmt, scheme)
    data_start = max(dfd_off + dfd_len, kvd_off + kvd_len)
    spans = []
    for m in range(n):
        off, length, ulength = LEVEL.unpack_from(data, HEADER.size + m * LEVEL.size)
        size = fmt.level_bytes(mip_size(width, m), mip_size(height, m))
        if ulength != size * n_layers or (scheme == SUPERCOMPRESSION_NONE and length != ulength):
            raise bad(f"mip {m}: {length} bytes ({ulength} uncompressed), expected {size * n_layers}")
        if off % align or off < data_start or off + length > len(data):
            raise bad(f"mip {m}: offset {off} misaligned or out of range")
        spans.append((off, length, ulength, size))
    inflated = sum(ulength for _, _, ulength, _ in spans)
    if inflated > MAX_TEXTURE_BYTES:
        raise bad(f"{inflated} bytes of texels, more than the {MAX_TEXTURE_BYTES} a loader inflates")
    end = max(off + length for off, length, _, _ in spans)
    if end != len(data):
        raise bad(f"size mismatch: level data ends at {end}, file has {len(data)} bytes")
    decompress = _zstd_decompressor(bad) if scheme == SUPERCOMPRESSION_ZSTD else None
    surfaces = []
    for m, (off, length, ulength, size) in enumerate(spans):
        level = bytes(data[off:off + length])
        if decompress is not None:
            level = decompress(m, level, ulength)
        surfaces.append(tuple(level[i * size:(i + 1) * size] for i in range(n_layers)))
    return Texture(fmt, width, height, tuple(surfaces), is_array=layers > 0)


def _zstd_decompressor(bad):
    """``f(mip, frame, uncompressed_length) -> bytes`` for scheme 2; every failure raises ``bad(...)``."""
    try:
        import zstandard
    except ImportError:
        raise bad("supercompression scheme 2 (zstd) needs the zstandard package (pip install zstandard)") from None
    dctx = zstandard.ZstdDecompressor()

    def decompress(m: int, frame: bytes, ulength: int) -> bytes:
        try:
            declared = zstandard.get_frame_parameters(frame).content_size
            if declared not in (ulength, zstandard.CONTENTSIZE_UNKNOWN):   # refuse before allocating
                raise bad(f"mip {m}: zstd frame declares {declared} bytes, uncompressedByteLength is {ulength}")
            out = dctx.decompress(frame, max_output_size=ulength, allow_extra_data=False)
        except zstandard.ZstdError as e:
            raise bad(f"mip {m}: zstd: {e}") from None
        if len(out) != ulength:
            raise bad(f"mip {m}: zstd inflated to {len(out)} bytes, uncompressedByteLength is {ulength}")
        return out

    return decompress
