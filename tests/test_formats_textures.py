"""DDS and KTX2: round trips for every format, Pillow as an independent DDS reader,
and the KTX2 header / level index / DFD checked byte by byte against the KTX 2.0 spec."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

from bakery.formats.dds import read_dds, write_dds
from bakery.formats.errors import BundleError
from bakery.formats.ktx2 import read_ktx2, write_ktx2
from bakery.formats.texture import FORMATS, make_texture
from bakery.imaging import mip_count

RNG = np.random.default_rng(0)


def random_texture(name: str, width: int, height: int, layers: int = 1, levels: int | None = None):
    fmt = FORMATS[name]
    levels = levels or mip_count(width, height)
    mips = []
    for m in range(levels):
        w, h = max(1, width >> m), max(1, height >> m)
        if fmt.compressed:
            surf = [RNG.bytes(fmt.level_bytes(w, h)) for _ in range(layers)]
            mips.append(surf if layers > 1 else surf[0])
        elif fmt.numpy_dtype == "u1":
            a = RNG.integers(0, 256, (layers, h, w, fmt.channels), dtype=np.uint8)
            mips.append(a if layers > 1 else a[0])
        else:
            a = RNG.standard_normal((layers, h, w, fmt.channels)).astype(np.float16)
            mips.append(a if layers > 1 else a[0])
    return make_texture(name, mips, width=width, height=height)


@pytest.mark.parametrize("container", ["dds", "ktx2"])
@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("size,layers", [((13, 6), 1), ((8, 8), 3)])
def test_round_trip_every_format(container, name, size, layers):
    tex = random_texture(name, *size, layers=layers)
    write, read = (write_dds, read_dds) if container == "dds" else (write_ktx2, read_ktx2)
    data = write(tex)
    back = read(data)
    assert (back.format, back.width, back.height) == (tex.format, tex.width, tex.height)
    assert back.levels == tex.levels and back.level_count == mip_count(*size)
    assert back.is_array == (layers > 1)
    assert write(back) == data
    if not tex.format.compressed:
        np.testing.assert_array_equal(back.array(1, layers - 1), tex.array(1, layers - 1))


def test_uncompressed_arrays_quantise_and_keep_values():
    a = np.array([[[0.0], [1.0]], [[0.5], [2.0]]])
    tex = make_texture("r8_unorm", [a])
    assert read_dds(write_dds(tex)).array().ravel().tolist() == [0, 255, 128, 255]
    h = np.array([[[1.5, -2.0, 65504.0, 0.25]]], dtype=np.float32)
    np.testing.assert_array_equal(read_ktx2(write_ktx2(make_texture("rgba16f", [h]))).array(), h.astype(np.float16))


def test_make_texture_rejects_wrong_sizes():
    with pytest.raises(ValueError, match="needs"):
        make_texture("bc1_unorm", [bytes(8)], width=8, height=8)
    with pytest.raises(ValueError, match="mip"):
        make_texture("rgba8_unorm", [np.zeros((4, 4, 4)), np.zeros((4, 4, 4))])
    with pytest.raises(ValueError, match="levels"):
        make_texture("r8_unorm", [np.zeros((2, 2))] + [np.zeros((1, 1))] * 2)
    with pytest.raises(ValueError, match="4]"):
        make_texture("rgba8_unorm", [np.zeros((4, 4, 3))])


# --- Pillow as an independent DDS reader -------------------------------------------

def _pillow(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return np.asarray(im)


def _expand565(c: int) -> tuple[int, int, int]:
    r, g, b = (c >> 11) & 31, (c >> 5) & 63, c & 31
    return (r << 3) | (r >> 2), (g << 2) | (g >> 4), (b << 3) | (b >> 2)


def _bc7_mode6_solid(r: int, g: int, b: int, a: int) -> bytes:
    """A BC7 mode-6 block whose every texel is (r, g, b, a); needs each value's low bit equal."""
    bits, pos = 1 << 6, 7
    for v in (r >> 1, r >> 1, g >> 1, g >> 1, b >> 1, b >> 1, a >> 1, a >> 1):
        bits |= v << pos
        pos += 7
    bits |= (r & 1) << pos | (r & 1) << (pos + 1)          # p-bits; indices stay 0
    return bits.to_bytes(16, "little")


def test_pillow_reads_rgba8_and_our_top_mip_matches():
    tex = random_texture("rgba8_unorm", 8, 4, levels=3)
    np.testing.assert_array_equal(_pillow(write_dds(tex)), tex.array(0))


def test_pillow_decodes_bc1_bc4_bc5_bc7_block_order():
    colors565 = [0xF800, 0x07E0, 0x001F, 0xFFE0]     # one solid colour per 4x4 block of an 8x8 image
    bc1 = b"".join(struct.pack("<HHI", c, 0, 0) for c in colors565)
    got = _pillow(write_dds(make_texture("bc1_unorm", [bc1, bytes(8)], width=8, height=8)))
    for k, c in enumerate(colors565):
        by, bx = divmod(k, 2)
        assert tuple(got[by * 4 + 1, bx * 4 + 2, :3]) == _expand565(c)
    reds = [10, 90, 170, 250]
    got = _pillow(write_dds(make_texture("bc4_unorm", [b"".join(bytes([r, 0]) + bytes(6) for r in reds)],
                                         width=8, height=8)))
    assert [got[0, 0], got[0, 4], got[4, 0], got[7, 7]] == reds
    got = _pillow(write_dds(make_texture("bc5_unorm", [bytes([200, 0]) + bytes(6) + bytes([50, 0]) + bytes(6)],
                                         width=4, height=4)))
    assert tuple(got[3, 3][:2]) == (200, 50)
    solid = [(254, 128, 0, 254), (11, 21, 31, 41)]   # low bits equal within a block (shared p-bit)
    bc7 = b"".join(_bc7_mode6_solid(*c) for c in solid)
    got = _pillow(write_dds(make_texture("bc7_unorm", [bc7], width=8, height=4)))
    assert tuple(got[0, 0]) == solid[0] and tuple(got[3, 7]) == solid[1]


# --- KTX2 byte by byte against the KTX 2.0 specification ---------------------------

def _u32(data, off):
    return struct.unpack_from("<I", data, off)[0]


def _u64(data, off):
    return struct.unpack_from("<Q", data, off)[0]


def test_ktx2_rgba8_header_index_dfd_bytes():
    tex = random_texture("rgba8_unorm", 4, 2, levels=2)
    d = write_ktx2(tex)
    assert d[:12] == bytes([0xAB, 0x4B, 0x54, 0x58, 0x20, 0x32, 0x30, 0xBB, 0x0D, 0x0A, 0x1A, 0x0A])
    # vkFormat R8G8B8A8_UNORM=37, typeSize 1, 4x2, depth 0, layerCount 0, faceCount 1, 2 levels, no supercompression
    assert [_u32(d, 12 + 4 * i) for i in range(9)] == [37, 1, 4, 2, 0, 0, 1, 2, 0]
    dfd_off, dfd_len, kvd_off, kvd_len = (_u32(d, 48 + 4 * i) for i in range(4))
    assert (_u64(d, 64), _u64(d, 72)) == (0, 0)                     # no supercompression global data
    assert dfd_off == 80 + 2 * 24 and dfd_len == 4 + 24 + 4 * 16
    expected_dfd = [dfd_len, 0, 2 | (88 << 16), 1 | (1 << 8) | (1 << 16), 0, 4, 0]
    for ch, ch_id in enumerate([0, 1, 2, 15]):                       # R, G, B, A
        expected_dfd += [(ch * 8) | (7 << 16) | (ch_id << 24), 0, 0, 255]
    assert [_u32(d, dfd_off + 4 * i) for i in range(dfd_len // 4)] == expected_dfd
    assert kvd_off == dfd_off + dfd_len
    assert _u32(d, kvd_off) == len(b"KTXwriter\0") + len(d[kvd_off + 14:].split(b"\0")[0]) + 1
    assert d[kvd_off + 4:kvd_off + 14] == b"KTXwriter\0" and d[kvd_off + 14:].startswith(b"bakery ")
    assert kvd_len % 4 == 0
    off0, len0, ulen0 = (_u64(d, 80 + 8 * i) for i in range(3))
    off1, len1, ulen1 = (_u64(d, 104 + 8 * i) for i in range(3))
    assert (len0, ulen0, len1, ulen1) == (32, 32, 8, 8)
    assert off1 < off0, "smallest mip first"
    assert off1 == kvd_off + kvd_len and off0 == off1 + 8 and off0 % 4 == 0 and len(d) == off0 + 32
    assert d[off0:off0 + 32] == tex.levels[0][0] and d[off1:off1 + 8] == tex.levels[1][0]


@pytest.mark.parametrize("name,vk,model,plane,samples", [
    ("bc1_unorm", 131, 128, 8, [(0, 63, 0)]),
    ("bc4_unorm", 139, 131, 8, [(0, 63, 0)]),
    ("bc5_unorm", 141, 132, 16, [(0, 63, 0), (64, 63, 1)]),
    ("bc7_unorm", 145, 134, 16, [(0, 127, 0)]),
    ("bc7_srgb", 146, 134, 16, [(0, 127, 0)]),
])
def test_ktx2_block_compressed_dfd_and_alignment(name, vk, model, plane, samples):
    tex = random_texture(name, 12, 8, layers=2, levels=4)
    d = write_ktx2(tex)
    assert _u32(d, 12) == vk and _u32(d, 16) == 1 and _u32(d, 32) == 2 and _u32(d, 40) == 4
    dfd_off = _u32(d, 48)
    words = [_u32(d, dfd_off + 4 * i) for i in range(7 + 4 * len(samples))]
    transfer = 2 if name.endswith("srgb") else 1
    assert words[1:7] == [0, 2 | ((24 + 16 * len(samples)) << 16), model | (1 << 8) | (transfer << 16),
                          3 | (3 << 8), plane, 0]
    for i, (bit_off, bit_len_m1, ch) in enumerate(samples):
        assert words[7 + 4 * i:11 + 4 * i] == [bit_off | (bit_len_m1 << 16) | (ch << 24), 0, 0, 0xFFFFFFFF]
    for m in range(4):
        off, length = _u64(d, 80 + 24 * m), _u64(d, 88 + 24 * m)
        assert off % plane == 0 and length == 2 * tex.format.level_bytes(max(1, 12 >> m), max(1, 8 >> m))
        assert d[off:off + length] == tex.levels[m][0] + tex.levels[m][1]     # layers in order within a level


def test_ktx2_float16_dfd_samples():
    d = write_ktx2(random_texture("rgba16f", 2, 2, levels=1))
    assert _u32(d, 12) == 97 and _u32(d, 16) == 2
    dfd_off = _u32(d, 48)
    assert _u32(d, dfd_off + 20) == 8                                # bytesPlane0
    for i, ch in enumerate([0, 1, 2, 15]):
        s = [_u32(d, dfd_off + 28 + 16 * i + 4 * k) for k in range(4)]
        assert s == [(16 * i) | (15 << 16) | ((ch | 0xC0) << 24), 0, 0xBF800000, 0x3F800000]


@pytest.mark.parametrize("container", ["dds", "ktx2"])
def test_damaged_textures_raise_bundle_error(container):
    tex = random_texture("bc7_unorm", 8, 8)
    write, read = (write_dds, read_dds) if container == "dds" else (write_ktx2, read_ktx2)
    data = write(tex)
    for bad in (data[:-1], data[:50], b"XXXX" + data[4:], data + b"\0"):
        with pytest.raises(BundleError) as e:
            read(bad, where=f"b/t.{container}")
        assert str(e.value).startswith(f"b/t.{container}: ")
