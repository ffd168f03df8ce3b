"""BundleWriter: manifest contents, determinism, name rules; atomic_publish."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from bakery.formats.bundle import BundleWriter, atomic_publish
from bakery.formats.publish import aside_path, recover
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec

FIELDS = {"stage": {"type": "demo", "version": "1"}, "params": {"steps": 10, "lr": 0.01}, "seed": 7,
          "device": {"backend": "vulkan", "adapter": "llvmpipe", "cooperative_vector": False, "software": True},
          "metrics": {"psnr": np.float32(31.25), "lossless": float("inf")}}


def make_bundle(folder, seed=0):
    spec = NetworkSpec(FrequencyEncoding(2, 2), (8,), 3)
    w = BundleWriter(folder)
    w.write_weights("weights.bin", spec, spec.init_params(seed))
    w.write_png("preview.png", np.linspace(0, 1, 4 * 4 * 3).reshape(4, 4, 3))
    w.write_texture("latents.dds", "rgba8_unorm", [np.full((4, 4, 4), 0.5), np.zeros((2, 2, 4))])
    w.write_json("extra/info.json", {"b": 1, "a": [1.5, 2]})
    return w.finalize(dict(FIELDS))


def test_manifest_lists_every_file_with_size_and_hash(tmp_path):
    m = make_bundle(tmp_path / "b")
    on_disk = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert on_disk == m
    assert m["schema_version"] == 2 and m["seed"] == 7 and m["stage"]["type"] == "demo"
    assert [f["name"] for f in m["files"]] == ["extra/info.json", "latents.dds", "preview.png", "weights.bin"]
    for f in m["files"]:
        data = (tmp_path / "b" / f["name"]).read_bytes()
        assert f["bytes"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
    assert m["metrics"] == {"psnr": 31.25, "lossless": "inf"}
    net = m["networks"]["decoder"]
    assert net["file"] == "weights.bin" and net["dtype"] == "float16"
    assert [(l["in"], l["out"], l["activation"]) for l in net["layers"]] == [(8, 8, "relu"), (8, 3, "identity")]
    assert all(l["weight_offset"] % 64 == 0 and l["bias_offset"] % 16 == 0 for l in net["layers"])
    assert m["textures"]["latents.dds"] == {"format": "rgba8_unorm", "width": 4, "height": 4, "mips": 2, "layers": 1,
                                            "array": False, "dxgi_format": 28, "vk_format": 37}


def test_same_inputs_give_byte_identical_bundles(tmp_path):
    make_bundle(tmp_path / "a")
    make_bundle(tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 5
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    make_bundle(tmp_path / "c", seed=1)
    assert (tmp_path / "a/manifest.json").read_bytes() != (tmp_path / "c/manifest.json").read_bytes()


@pytest.mark.parametrize("name", ["../x", "/abs", "a/b/c", "manifest.json", "", "sp ace", ".hidden"])
def test_rejects_unsafe_names(tmp_path, name):
    with pytest.raises(ValueError):
        BundleWriter(tmp_path).write_bytes(name, b"x")


def test_rejects_reserved_and_missing_fields(tmp_path):
    with pytest.raises(ValueError, match="files"):
        BundleWriter(tmp_path / "a").finalize({**FIELDS, "files": []})
    with pytest.raises(ValueError, match="metrics"):
        BundleWriter(tmp_path / "b").finalize({k: v for k, v in FIELDS.items() if k != "metrics"})


def test_duplicate_file_and_second_network_rejected(tmp_path):
    spec = NetworkSpec(FrequencyEncoding(1, 1), (4,), 1)
    w = BundleWriter(tmp_path)
    w.write_bytes("a.bin", b"1")
    with pytest.raises(ValueError):
        w.write_bytes("a.bin", b"2")
    w.write_weights("w.bin", spec, spec.init_params(0))
    with pytest.raises(ValueError):
        w.write_weights("w2.bin", spec, spec.init_params(0))


def _folder(path, text):
    path.mkdir()
    (path / "manifest.json").write_text(text)
    return path


@pytest.mark.parametrize("use_exchange", [True, False])
def test_atomic_publish_replaces_and_cleans_up(tmp_path, use_exchange):
    final = tmp_path / "out" / "bundle"
    atomic_publish(_folder(tmp_path / "s1", "old"), final, use_exchange=use_exchange)
    assert (final / "manifest.json").read_text() == "old"
    atomic_publish(_folder(tmp_path / "s2", "new"), final, use_exchange=use_exchange)
    assert (final / "manifest.json").read_text() == "new"
    assert sorted(p.name for p in final.parent.iterdir()) == ["bundle"]
    assert not (tmp_path / "s2").exists()


def test_recover_restores_old_folder_after_crash_between_renames(tmp_path):
    final = tmp_path / "bundle"
    # the state a SIGKILL leaves between "rename old aside" and "rename new in"
    _folder(aside_path(final), "old")
    recover(final)
    assert (final / "manifest.json").read_text() == "old" and not aside_path(final).exists()
    # and the state after "rename new in" but before "remove old"
    _folder(aside_path(final), "older")
    atomic_publish(_folder(tmp_path / "s", "new"), final)
    assert (final / "manifest.json").read_text() == "new" and not aside_path(final).exists()


CHILD = r"""
import sys, os
from pathlib import Path
from bakery.formats.publish import atomic_publish
root, use_exchange = Path(sys.argv[1]), sys.argv[2] == "1"
final = root / "bundle"
i = 0
while True:
    stage = root / f"staging-{i}"
    stage.mkdir()
    for k in range(20):   # a bundle has its manifest: recover() restores only an aside that holds one
        (stage / ("manifest.json" if k == 0 else f"f{k}.txt")).write_text(str(i))
    atomic_publish(stage, final, use_exchange=use_exchange)
    i += 1
    if i == 3:
        print("ready", flush=True)
"""


@pytest.mark.parametrize("use_exchange", [True, False])
def test_sigkill_at_random_instants_leaves_a_complete_bundle(tmp_path, use_exchange):
    """Kill a publishing loop at random moments: the final folder is always one whole version."""
    import signal
    import subprocess
    import sys
    import time

    from bakery.formats.publish import recover

    rng = np.random.default_rng(0)
    for trial in range(6):
        root = tmp_path / f"t{trial}"
        root.mkdir()
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), "1" if use_exchange else "0"],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(float(rng.uniform(0, 0.05)))
        child.send_signal(signal.SIGKILL)
        child.wait()
        final = root / "bundle"
        if not use_exchange:
            recover(final)        # what the next publish does first
        assert final.is_dir()
        contents = {p.read_text() for p in final.iterdir()}
        assert len(list(final.iterdir())) == 20 and len(contents) == 1, (trial, contents)
