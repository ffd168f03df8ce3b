"""KTX2 with Zstandard supercompression (scheme 2): round trips, the header and level
index byte by byte against the KTX 2.0 spec, size on smooth images, and damaged zstd
payloads refused with the reader's one error type."""

from __future__ import annotations

import struct
import sys

import numpy as np
import pytest

zstandard = pytest.importorskip("zstandard")

from bakery.formats.bundle import BundleWriter  # noqa: E402
from bakery.formats.errors import BundleError  # noqa: E402
from bakery.formats.ktx2 import read_ktx2, write_ktx2  # noqa: E402
from bakery.formats.reader import read_bundle  # noqa: E402
from bakery.formats.texture import FORMATS, make_texture  # noqa: E402
from bakery.imaging import mip_count  # noqa: E402

ZSTD_MAGIC = bytes([0x28, 0xB5, 0x2F, 0xFD])
FIELDS = {"stage": {"type": "fit", "version": "2"}, "params": {}, "seed": 0, "device": None, "metrics": {}}


def _u32(d, off):
    return struct.unpack_from("<I", d, off)[0]


def _u64(d, off):
    return struct.unpack_from("<Q", d, off)[0]


def _index(d):
    """[(byteOffset, byteLength, uncompressedByteLength)] per level, level 0 first."""
    return [struct.unpack_from("<3Q", d, 80 + 24 * m) for m in range(_u32(d, 40))]


def smooth(h, w, layers=None, channels=4):
    """A gradient image (uint8), [H, W, C] or [layers, H, W, C]."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([x / max(w - 1, 1), y / max(h - 1, 1), (x + y) / max(w + h - 2, 1),
                     np.full_like(x, 0.75)][:channels], axis=-1)
    if layers is None:
        return base
    return np.stack([np.clip(base * (0.5 + 0.25 * i), 0, 1) for i in range(layers)])


def smooth_texture(name, w, h, layers=None):
    ch = FORMATS[name].channels
    return make_texture(name, [smooth(max(1, h >> m), max(1, w >> m), layers, ch) for m in range(mip_count(w, h))])


def bc7_texture(w, h, layers=1, levels=3, seed=0):
    rng = np.random.default_rng(seed)
    fmt = FORMATS["bc7_unorm"]
    mips = []
    for m in range(levels):
        surf = [rng.bytes(fmt.level_bytes(max(1, w >> m), max(1, h >> m))) for _ in range(layers)]
        mips.append(surf if layers > 1 else surf[0])
    return make_texture("bc7_unorm", mips, width=w, height=h)


# --- round trips -------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: smooth_texture("rgba8_unorm", 16, 8),               # RGBA8, full mip chain
    lambda: smooth_texture("rgba8_unorm", 13, 6, layers=3),     # texture array, odd sizes
    lambda: smooth_texture("r8_unorm", 5, 9),                   # 1-byte texels: no mipPadding either way
    lambda: bc7_texture(12, 8, layers=1, levels=4),             # BC7 payload (random blocks)
    lambda: bc7_texture(8, 8, layers=2, levels=4),
], ids=["rgba8-mips", "rgba8-array", "r8", "bc7", "bc7-array"])
def test_zstd_round_trip(make):
    tex = make()
    data = write_ktx2(tex, supercompression="zstd")
    back = read_ktx2(data)
    assert (back.format, back.width, back.height, back.is_array) == (tex.format, tex.width, tex.height, tex.is_array)
    assert back.levels == tex.levels
    assert write_ktx2(back, supercompression="zstd") == data, "deterministic"
    assert write_ktx2(tex, supercompression="zstd") == data
    plain = write_ktx2(tex)
    assert write_ktx2(tex, supercompression="none") == plain
    assert read_ktx2(plain).levels == back.levels


# --- byte by byte against the KTX 2.0 specification ---------------------------------

def test_zstd_header_index_and_level_bytes():
    tex = smooth_texture("rgba8_unorm", 16, 8, layers=2)
    d = write_ktx2(tex, supercompression="zstd")
    plain = write_ktx2(tex)
    # vkFormat 37, typeSize 1, 16x8, depth 0, 2 layers, 1 face, 5 levels, supercompressionScheme 2
    assert [_u32(d, 12 + 4 * i) for i in range(9)] == [37, 1, 16, 8, 0, 2, 1, 5, 2]
    assert d[44:48] == bytes([2, 0, 0, 0])
    assert plain[44:48] == bytes(4)
    assert d[:44] == plain[:44], "identifier and every field before the scheme are unchanged"
    assert (_u64(d, 64), _u64(d, 72)) == (0, 0), "Zstandard has no supercompression global data"
    dfd_off, dfd_len, kvd_off, kvd_len = (_u32(d, 48 + 4 * i) for i in range(4))
    assert (dfd_off, dfd_len, kvd_off, kvd_len) == tuple(_u32(plain, 48 + 4 * i) for i in range(4))
    assert d[dfd_off:kvd_off + kvd_len] == plain[dfd_off:kvd_off + kvd_len], "DFD and key/value data unchanged"
    index, plain_index = _index(d), _index(plain)
    pos = kvd_off + kvd_len
    for m in reversed(range(5)):                 # smallest level first, packed: no mipPadding when supercompressed
        off, length, ulength = index[m]
        raw = b"".join(tex.levels[m])
        assert off == pos
        assert ulength == len(raw) == plain_index[m][2]
        frame = d[off:off + length]
        assert len(frame) == length and frame[:4] == ZSTD_MAGIC
        params = zstandard.get_frame_parameters(frame)
        assert params.content_size == ulength and params.has_checksum
        assert zstandard.ZstdDecompressor().decompress(frame) == raw
        pos += length
    assert pos == len(d)


def test_zstd_is_smaller_on_a_smooth_image():
    tex = smooth_texture("rgba8_unorm", 64, 64, layers=2)
    plain, packed = write_ktx2(tex), write_ktx2(tex, supercompression="zstd")
    assert len(packed) < 0.9 * len(plain)
    for (_, length, ulength) in _index(packed)[:2]:
        assert length < ulength


def test_unknown_supercompression_is_refused():
    with pytest.raises(ValueError, match="supercompression"):
        write_ktx2(smooth_texture("r8_unorm", 2, 2), supercompression="zlib")


# --- damaged zstd payloads ------------------------------------------------------------

def _refused(data, match):
    with pytest.raises(BundleError, match=match) as e:
        read_ktx2(data, where="b/t.ktx2")
    msg = str(e.value)
    assert msg.startswith("b/t.ktx2: ") and "\n" not in msg
    return msg


def _set_level(d, m, off=None, length=None, ulength=None):
    d = bytearray(d)
    cur = list(struct.unpack_from("<3Q", d, 80 + 24 * m))
    for i, v in enumerate((off, length, ulength)):
        if v is not None:
            cur[i] = v
    struct.pack_into("<3Q", d, 80 + 24 * m, *cur)
    return bytes(d)


def _replace_level0(d, frame):
    """Puts ``frame`` in place of level 0's data (the last one in the file) and fixes its byteLength."""
    off, _, _ = _index(d)[0]
    return _set_level(d[:off] + frame, 0, length=len(frame))


def test_corrupted_zstd_payload_raises_bundle_error():
    tex = smooth_texture("rgba8_unorm", 32, 32)
    d = write_ktx2(tex, supercompression="zstd")
    off, length, ulength = _index(d)[0]
    raw = b"".join(tex.levels[0])

    bad = bytearray(d)
    bad[off + length // 2] ^= 0x55                                   # damage inside the compressed blocks
    _refused(bytes(bad), "mip 0: zstd")
    bad = bytearray(d)
    bad[off] ^= 0xFF                                                 # frame magic
    _refused(bytes(bad), "mip 0: zstd")
    _refused(_replace_level0(d, d[off:off + length - 3]), "mip 0: zstd")            # frame cut short
    _refused(_replace_level0(d, d[off:off + length] + b"\0\0\0"), "mip 0: zstd")     # bytes after the frame
    _refused(_replace_level0(d, b""), "mip 0: zstd")

    other = zstandard.ZstdCompressor(level=3).compress(raw[:-4])     # frame says a different size
    _refused(_replace_level0(d, other), "mip 0: zstd frame declares")
    short = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw[:-4])
    _refused(_replace_level0(d, short), "mip 0: zstd inflated to")   # no declared size, inflates short
    longer = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw + b"xxxx")
    _refused(_replace_level0(d, longer), "mip 0: zstd")              # inflates past uncompressedByteLength
    _refused(_set_level(d, 0, ulength=ulength - 4), "mip 0: .*uncompressed")        # index disagrees with format
    _refused(_set_level(d, 1, off=_index(d)[1][0] + 1), "mip 1")

    # a frame without content size that inflates to exactly the right bytes is valid KTX2
    exact = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw)
    assert read_ktx2(_replace_level0(d, exact)).levels == tex.levels


def test_random_damage_to_a_zstd_file_only_raises_bundle_error():
    tex = smooth_texture("rgba8_unorm", 16, 16, layers=2)
    d = write_ktx2(tex, supercompression="zstd")
    rng = np.random.default_rng(7)
    refused = 0
    for _ in range(300):
        bad = bytearray(d)
        if rng.integers(3) == 0:
            bad = bad[:int(rng.integers(len(bad)))]
        else:
            for _ in range(int(rng.integers(1, 4))):
                bad[int(rng.integers(len(bad)))] ^= int(rng.integers(1, 256))
        try:
            back = read_ktx2(bytes(bad), where="b/t.ktx2")
        except BundleError as e:
            refused += 1
            assert str(e).startswith("b/t.ktx2: ") and "\n" not in str(e)
            continue
        assert back.levels == tex.levels, "damage accepted must not change the texels (frames carry checksums)"
    assert refused > 250


def test_reader_without_zstandard_names_the_file(monkeypatch):
    d = write_ktx2(smooth_texture("r8_unorm", 4, 4), supercompression="zstd")
    monkeypatch.setitem(sys.modules, "zstandard", None)             # import zstandard -> ImportError
    _refused(d, "needs the zstandard package")
    assert read_ktx2(write_ktx2(smooth_texture("r8_unorm", 4, 4))).width == 4   # scheme 0 needs no zstandard


# --- BundleWriter.write_texture ----------------------------------------------------------

def test_bundle_writer_passes_supercompression_through(tmp_path):
    w = BundleWriter(tmp_path / "b")
    img = smooth(32, 32)
    w.write_texture("albedo.ktx2", "rgba8_unorm", [img, smooth(16, 16)], supercompression="zstd")
    w.write_texture("plain.ktx2", "rgba8_unorm", [img, smooth(16, 16)])
    w.write_texture("bc.ktx2", texture=bc7_texture(8, 8), supercompression="zstd")
    with pytest.raises(ValueError, match="DDS"):
        w.write_texture("latents.dds", "rgba8_unorm", [img], supercompression="zstd")
    w.write_texture("latents.dds", "rgba8_unorm", [img], supercompression="none")
    with pytest.raises(ValueError, match="supercompression"):
        w.write_texture("other.ktx2", "rgba8_unorm", [img], supercompression="lz4")
    w.finalize(dict(FIELDS))
    zipped = (tmp_path / "b" / "albedo.ktx2").read_bytes()
    assert _u32(zipped, 44) == 2 and _u32((tmp_path / "b" / "plain.ktx2").read_bytes(), 44) == 0
    assert len(zipped) < (tmp_path / "b" / "plain.ktx2").stat().st_size
    b = read_bundle(tmp_path / "b")
    assert b.textures["albedo.ktx2"].levels == b.textures["plain.ktx2"].levels
    assert b.textures["bc.ktx2"].levels == bc7_texture(8, 8).levels


def test_a_texture_encoded_beforehand_is_written_as_write_texture_would(tmp_path):
    # stages encode a zstd KTX2 on side work (encode_texture) and write it later
    from bakery.formats.bundle import encode_texture

    img = smooth(32, 32)
    direct, later = BundleWriter(tmp_path / "a"), BundleWriter(tmp_path / "b")
    direct.write_texture("albedo.ktx2", "rgba8_unorm", [img, smooth(16, 16)], supercompression="zstd")
    encoded = encode_texture("albedo.ktx2", "rgba8_unorm", [img, smooth(16, 16)], supercompression="zstd")
    later.write_texture("albedo.ktx2", encoded=encoded)
    with pytest.raises(ValueError, match="albedo.ktx2"):
        later.write_texture("other.ktx2", encoded=encoded)
    a, b = direct.finalize(dict(FIELDS)), later.finalize(dict(FIELDS))
    assert (tmp_path / "a" / "albedo.ktx2").read_bytes() == (tmp_path / "b" / "albedo.ktx2").read_bytes()
    assert a["textures"] == b["textures"] and a["files"] == b["files"]


def test_levels_compressed_on_two_threads_give_the_serial_bytes(monkeypatch):
    import bakery.formats.ktx2 as ktx2

    tex = make_texture("rgba8_unorm", [smooth(64, 64), smooth(32, 32), smooth(16, 16)])
    monkeypatch.setattr(ktx2, "ZSTD_PARALLEL_FROM", 1 << 40)
    serial = write_ktx2(tex, supercompression="zstd")
    monkeypatch.setattr(ktx2, "ZSTD_PARALLEL_FROM", 0)
    assert write_ktx2(tex, supercompression="zstd") == serial
    assert read_ktx2(serial).levels == tex.levels
