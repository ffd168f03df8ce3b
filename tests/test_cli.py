"""The bakery CLI end to end: devices, one-off runs, and its one-line errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.formats.images import encode_png
from tests.images import photo_like

SMALL = ["--param", "steps=120", "--param", "lr=0.02", "--param", "batch=1024", "--param", "width=16", "--param", "layers=1",
         "--param", "octaves=3"]


@pytest.fixture()
def image(tmp_path):
    path = tmp_path / "photo.png"
    path.write_bytes(encode_png(photo_like(32, seed=4)))
    return path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_devices_json_lists_the_device(device):
    r = _run("devices", "--json")
    assert r.exit_code == 0
    rows = json.loads(r.output)
    assert rows and set(rows[0]) == {"backend", "adapter", "cooperative_vector", "software"}
    assert any(row["adapter"] == device.info.adapter for row in rows)


def test_run_neural_texture_writes_a_bundle(device, image, tmp_path):
    out = tmp_path / "out"
    r = _run("run", "neural_texture", image, "-o", out, "--seed", 3, *SMALL)
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 3
    assert manifest["stage"]["type"] == "neural_texture"
    assert manifest["device"]["adapter"] == device.info.adapter
    assert 15.0 < manifest["metrics"]["psnr_db"] < 60.0
    assert [l["out"] for l in manifest["networks"]["decoder"]["layers"]] == [16, 3]
    names = {f["name"] for f in manifest["files"]}
    assert {"weights.bin", "preview.png", "decoder.onnx", "decoder.slang"} <= names
    r = _run("verify", out)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("case", ["missing", "unreadable", "unknown_param", "bad_value"])
def test_bad_input_is_one_line_exit_2_nothing_written(case, image, tmp_path):
    out = tmp_path / "out"
    args = ["run", "neural_texture", image, "-o", out]
    if case == "missing":
        args[2] = tmp_path / "nope.png"
    elif case == "unreadable":
        args[2] = tmp_path / "garbage.png"
        args[2].write_bytes(b"not an image at all")
    elif case == "unknown_param":
        args += ["--param", "stpes=10"]
    else:
        args += ["--param", "steps=-4"]
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 2
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("bakery: error:")
    expected = {"missing": "nope.png", "unreadable": "garbage.png", "unknown_param": "stpes",
                "bad_value": "steps"}[case]
    assert expected in lines[0]
    assert not out.exists()
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())


@pytest.mark.parametrize("command", [["devices"], ["run", "neural_texture", "IMAGE", "-o", "OUT"]])
def test_no_vulkan_driver_says_what_to_install(command, image, tmp_path):
    """A machine without any GPU driver: one line naming what to install, exit 2.
    On a GPU machine the environment names its drivers (VK_DRIVER_FILES and friends, as
    .device/setup.sh sets them) and CUDA would stand in for Vulkan: hide all of them."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("VK_")}  # added drivers, layers, loader debug
    env.update(VK_DRIVER_FILES=str(tmp_path / "none.json"), VK_ICD_FILENAMES=str(tmp_path / "none.json"),
               VK_LOADER_LAYERS_DISABLE="~implicit~", CUDA_VISIBLE_DEVICES="")
    args = [str(image) if a == "IMAGE" else str(tmp_path / "out") if a == "OUT" else a for a in command]
    r = subprocess.run([sys.executable, "-m", "bakery", *args], env=env, capture_output=True, text=True)
    assert r.returncode == 2
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    assert len(lines) == 1 and "mesa-vulkan-drivers" in lines[0], lines
    assert not (tmp_path / "out").exists()
