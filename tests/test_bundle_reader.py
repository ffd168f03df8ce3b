"""The standalone reader: round trips, one clear error per kind of damage, and a seeded
fuzz (hundreds of corrupted bundles) where nothing but BundleError may escape."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bakery.errors import UsageError
from bakery.formats.bundle import BundleWriter
from bakery.formats.errors import BundleError
from bakery.formats.reader import find_bundles, read_bundle
from bakery.formats.texture import FORMATS
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec

SPEC = NetworkSpec(FrequencyEncoding(2, 3), (16, 8), 3, hidden_activation="tanh", output_activation="sigmoid")
FIELDS = {"stage": {"type": "fit", "version": "2"}, "params": {"steps": 3}, "seed": 11,
          "device": {"backend": "vulkan", "adapter": "llvmpipe", "cooperative_vector": False, "software": True},
          "metrics": {"psnr": 30.5}}


def write_full_bundle(folder, dtype="float16"):
    rng = np.random.default_rng(5)
    params = SPEC.init_params(4)
    w = BundleWriter(folder)
    w.write_weights("weights.bin", SPEC, params, dtype=dtype)
    w.write_texture("latents.dds", "rgba16f", [rng.standard_normal((2, 8, 8, 4)), rng.standard_normal((2, 4, 4, 4))])
    w.write_texture("albedo.ktx2", "bc7_unorm", [rng.bytes(64), rng.bytes(16)], width=8, height=8)
    w.write_texture("mask.ktx2", "r8_unorm", [rng.random((4, 4, 1))])
    w.write_png("preview.png", rng.random((4, 4, 3)))
    w.finalize(dict(FIELDS))
    return params


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_round_trip_every_part(tmp_path, dtype):
    params = write_full_bundle(tmp_path / "b", dtype)
    b = read_bundle(tmp_path / "b")
    assert b.manifest["seed"] == 11 and b.network == SPEC
    np.testing.assert_array_equal(b.params, params.astype(dtype).astype(np.float32))
    x = np.random.default_rng(0).random((32, 2))
    np.testing.assert_allclose(b.decode(x), SPEC.forward(params.astype(dtype).astype(np.float32), x), rtol=0, atol=1e-12)
    assert set(b.textures) == {"latents.dds", "albedo.ktx2", "mask.ktx2"}
    lat = b.textures["latents.dds"]
    assert (lat.format.name, lat.layer_count, lat.level_count) == ("rgba16f", 2, 2)
    assert b.textures["mask.ktx2"].array().shape == (4, 4, 1)


def test_reader_does_not_import_gpu_or_onnx_modules(tmp_path):
    write_full_bundle(tmp_path / "b")
    code = ("import sys; from bakery.formats.reader import read_bundle; read_bundle(sys.argv[1]); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('slangpy', 'onnx', 'PIL', 'click')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "b")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _rewrite_manifest(folder, edit):
    m = json.loads((folder / "manifest.json").read_text())
    edit(m)
    (folder / "manifest.json").write_text(json.dumps(m))


def _rehash(folder, m, name):
    data = (folder / name).read_bytes()
    for e in m["files"]:
        if e["name"] == name:
            e["bytes"], e["sha256"] = len(data), hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("damage,message,names", [
    (lambda d: (d / "weights.bin").write_bytes((d / "weights.bin").read_bytes()[:-5]), "size mismatch", "weights.bin"),
    (lambda d: (d / "preview.png").write_bytes(b"x" * (d / "preview.png").stat().st_size), "checksum", "preview.png"),
    (lambda d: (d / "albedo.ktx2").unlink(), "missing", "albedo.ktx2"),
    (lambda d: _rewrite_manifest(d, lambda m: m.pop("seed")), "missing key 'seed'", "manifest.json"),
    (lambda d: _rewrite_manifest(d, lambda m: m.update(schema_version=99)), "unknown schema version 99", "manifest.json"),
    (lambda d: (d / "manifest.json").write_text("{"), "not valid JSON", "manifest.json"),
    (lambda d: (d / "manifest.json").unlink(), "manifest.json not found", "b"),
])
def test_each_damage_gives_one_line_naming_the_file(tmp_path, damage, message, names):
    write_full_bundle(tmp_path / "b")
    damage(tmp_path / "b")
    with pytest.raises(BundleError, match=message) as e:
        read_bundle(tmp_path / "b")
    text = str(e.value)
    assert "\n" not in text
    assert text.split(": ")[0] == str(tmp_path / "b" / names if names != "b" else tmp_path / "b")
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2


def test_wrong_magic_behind_a_valid_checksum(tmp_path):
    write_full_bundle(tmp_path / "b")
    d = tmp_path / "b"
    (d / "weights.bin").write_bytes(b"NOPE" + (d / "weights.bin").read_bytes()[4:])
    _rewrite_manifest(d, lambda m: _rehash(d, m, "weights.bin"))
    with pytest.raises(BundleError, match="weights.bin: wrong magic"):
        read_bundle(d)


def test_manifest_network_disagreeing_with_weights_header(tmp_path):
    write_full_bundle(tmp_path / "b")
    _rewrite_manifest(tmp_path / "b", lambda m: m["networks"]["decoder"]["layers"][0].update(out=17))
    with pytest.raises(BundleError, match="weights.bin: layer sizes"):
        read_bundle(tmp_path / "b")


def test_find_bundles(tmp_path):
    write_full_bundle(tmp_path / "out" / "fit" / "a")
    write_full_bundle(tmp_path / "out" / "mip" / "b")
    assert find_bundles(tmp_path / "out") == [tmp_path / "out/fit/a", tmp_path / "out/mip/b"]


# --- fuzz ---------------------------------------------------------------------------

JUNK = [None, True, -1, 0, 2 ** 40, 1e300, "", "x" * 3, [], {}, [1, "a"], {"k": None}]


def _paths(obj, prefix=()):
    """Every (path-to-container, key) in a JSON tree."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out += _paths(v, prefix + (k,))
    return out


def _corrupt(rng, files: dict[str, bytes]) -> tuple[dict[str, bytes], bool]:
    """One random corruption; returns new files and whether the reader must refuse them."""
    files = dict(files)
    names = sorted(files)
    kind = int(rng.integers(0, 7))
    manifest = json.loads(files["manifest.json"])
    if kind in (0, 1, 2):                               # raw damage to one file, checksum left stale
        name = names[int(rng.integers(len(names)))]
        data = bytearray(files[name])
        if kind == 0:
            data = data[:int(rng.integers(0, len(data)))]
        elif kind == 1:
            for _ in range(int(rng.integers(1, 6))):
                i = int(rng.integers(len(data)))
                data[i] ^= int(rng.integers(1, 256))
        else:
            data += rng.bytes(int(rng.integers(1, 40)))
        files[name] = bytes(data)
        return files, name != "manifest.json"          # a flipped manifest byte may still be valid JSON
    if kind in (3, 4):                                  # delete a key / replace a value in the manifest
        paths = _paths(manifest)
        path = paths[int(rng.integers(len(paths)))]
        parent = manifest
        for k in path[:-1]:
            parent = parent[k]
        if kind == 3:
            parent.pop(path[-1]) if isinstance(parent, dict) else parent.pop(path[-1])
        else:
            parent[path[-1]] = copy.deepcopy(JUNK[int(rng.integers(len(JUNK)))])
        files["manifest.json"] = json.dumps(manifest).encode()
        return files, False
    # kinds 5, 6: damage a binary file and update its manifest entry, so the format parsers see it
    name = [n for n in names if n.endswith((".bin", ".dds", ".ktx2"))][int(rng.integers(4))]
    data = bytearray(files[name])
    if kind == 5:
        data = data[:int(rng.integers(0, len(data)))]
    else:
        lo = int(rng.integers(0, min(len(data), 256)))   # headers live at the front
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(lo, min(len(data), lo + 64)))] = int(rng.integers(0, 256))
    files[name] = bytes(data)
    for e in manifest["files"]:
        if e["name"] == name:
            e["bytes"], e["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    files["manifest.json"] = json.dumps(manifest).encode()
    return files, kind == 5


def test_fuzz_reader_only_raises_bundle_error(tmp_path):
    write_full_bundle(tmp_path / "good")
    original = {p.name: p.read_bytes() for p in (tmp_path / "good").iterdir()}
    rng = np.random.default_rng(1234)
    refused = 0
    for case in range(400):
        files, must_fail = _corrupt(rng, original)
        folder = tmp_path / f"case{case % 4}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        try:
            read_bundle(folder)
        except BundleError as e:
            refused += 1
            assert "\n" not in str(e) and str(folder) in str(e), (case, str(e))
            continue
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"case {case}: {type(e).__name__}: {e}")
        assert not must_fail, f"case {case}: damaged bundle was accepted"
    assert refused > 300


def test_several_named_networks_round_trip(tmp_path):
    encoder = NetworkSpec(FrequencyEncoding(2, 2), (8,), 4)
    w = BundleWriter(tmp_path / "b")
    w.write_weights("encoder.bin", encoder, encoder.init_params(1), network="encoder")
    w.write_weights("weights.bin", SPEC, SPEC.init_params(2))  # the decoder
    with pytest.raises(ValueError, match="written twice"):
        w.write_weights("again.bin", SPEC, SPEC.init_params(2), network="encoder")
    w.finalize(dict(FIELDS))
    b = read_bundle(tmp_path / "b")
    assert sorted(b.networks) == ["decoder", "encoder"]
    assert b.networks["encoder"][0] == encoder and b.network == SPEC
    assert sorted(b.by_role("weights")) == ["encoder.bin", "weights.bin"]
    # each network is checked against its own file
    _rewrite_manifest(tmp_path / "b", lambda m: m["networks"]["encoder"].update(weights_bytes=1))
    with pytest.raises(BundleError, match="networks.encoder.weights_bytes"):
        read_bundle(tmp_path / "b")
