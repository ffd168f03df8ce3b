"""The Ray runner on a local cluster that the tests start: the same bytes as the local
runner, every file of every stage, a worker killed mid-task retried, ``bakery verify``
passing. On lavapipe where it is installed; on a GPU machine without it, on the GPU
(CoopVec training is deterministic too: docs/RAY.md). Skipped where Ray is not installed
(``pip install 'bakery[ray]'``)."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline_helpers import tree_snapshot, write_image

from bakery.device import default_cache_dir, probe_device_class
from bakery.formats.cli import verify_cmd
from bakery.pipeline.cli import bake_cmd

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray's import: listen on loopback only
ray = pytest.importorskip("ray")

TESTS = Path(__file__).resolve().parent
#: The portable backend on lavapipe gives the same bytes on every run; where there is no
#: lavapipe (the GPU image) the pipelines bake on the GPU.
PORTABLE = probe_device_class("software") is not None
DEVICE = "software" if PORTABLE else "auto"

TINY_TOML = """\
[project]
name = "tiny"
out = "out"
cache = "cache"
device = "software"
seed = 3
plugins = ["pipeline_helpers", "runner_stages"]

[assets.photos]
image = "src/*.png"

[assets.materials]
material = "mats/*"

[stages.blur]
type = "test_blur"
inputs = ["photos"]

[stages.summary]
type = "test_summary"
inputs = ["stage:blur"]

[stages.texture]
type = "neural_texture"
inputs = ["photos"]
params = { steps = 20, batch = 256, width = 16, layers = 1 }

[stages.compress]
type = "ntc"
inputs = ["materials"]
params = { bpp = 18.0, steps = 10, batch = 256, hidden = 16, layers = 1, baseline = false }
""".replace('device = "software"', f'device = "{DEVICE}"')

CRASH_TOML = """\
[project]
name = "crash"
out = "out"
cache = "cache"
device = "software"
plugins = ["pipeline_helpers", "runner_stages"]

[assets.photo]
image = "src/a.png"

[stages.cpu]
type = "test_crash_once"
inputs = ["photo"]
params = { marker = "CPU_MARKER" }

[stages.gpu]
type = "test_device_crash_once"
inputs = ["photo"]
params = { marker = "GPU_MARKER" }

[stages.blur]
type = "test_blur"
inputs = ["photo"]
""".replace('device = "software"', f'device = "{DEVICE}"')


@pytest.fixture(scope="module")
def cluster():
    """A 2-CPU local cluster whose workers can import bakery and the test stages."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "RAY_AUTH_MODE")}
    path = [str(TESTS), str(TESTS.parent)] + ([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else [])
    os.environ["PYTHONPATH"] = os.pathsep.join(path)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield
    ray.shutdown()
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def bake(root, *args, code=0):
    cwd = os.getcwd()
    os.chdir(root)
    try:
        r = CliRunner().invoke(bake_cmd, ["pipeline.toml", *args])
    finally:
        os.chdir(cwd)
    assert r.exit_code == code, r.output
    return r


def outputs(root):
    """The bundles' files by content (the report and logs hold timings)."""
    return {k: v for k, v in tree_snapshot(root / "out").items()
            if not k.startswith("logs/") and k not in ("bake-report.json", "report.html")}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny pipeline baked by the local runner; its outputs are the reference."""
    root = tmp_path_factory.mktemp("tiny")
    for i, name in enumerate("ab"):
        write_image(root / "src" / f"{name}.png", seed=i, size=32)
    for k, role in enumerate(["albedo", "normal", "roughness", "metalness", "ao", "height"]):
        write_image(root / "mats" / "m1" / f"{role}.png", seed=10 + k, size=64)
    (root / "pipeline.toml").write_text(TINY_TOML)
    # Share the user's Slang compile cache (which the Ray workers use when files are shipped,
    # and test_ntc/test_cli fill with the same network shapes) so each kernel compiles once
    # per machine, not once per test folder.
    (root / "cache").mkdir()
    default_cache_dir().mkdir(parents=True, exist_ok=True)
    (root / "cache" / "device").symlink_to(default_cache_dir(), target_is_directory=True)
    assert "7 tasks: 7 built" in bake(root).output
    return root, outputs(root)


@pytest.mark.parametrize("mode", [(), ("--shared-cache",)], ids=["shipped", "shared-cache"])
def test_ray_bake_gives_the_local_bytes_and_verifies(cluster, tiny, mode):
    root, local = tiny
    r = bake(root, "--runner", "ray", "--force", *mode)
    assert "7 tasks: 7 built, 0 cached, 0 failed" in r.output
    assert outputs(root) == local
    assert (root / "out/logs/compress/materials/m1.log").stat().st_size > 0
    v = CliRunner().invoke(verify_cmd, [str(root / "out")])
    assert v.exit_code == 0 and "7 ok, 0 bad" in v.output, v.output
    assert "7 tasks: 0 built, 7 cached" in bake(root, "--runner", "ray").output


def test_ray_worker_killed_mid_task_is_retried(cluster, tmp_path):
    write_image(tmp_path / "src" / "a.png", seed=1)
    (tmp_path / "pipeline.toml").write_text(CRASH_TOML.replace("CPU_MARKER", str(tmp_path / "cpu-died"))
                                            .replace("GPU_MARKER", str(tmp_path / "gpu-died")))
    r = bake(tmp_path, "--runner", "ray", "--max-retries", "1")
    assert "3 tasks: 3 built" in r.output, r.output
    assert (tmp_path / "cpu-died").is_file() and (tmp_path / "gpu-died").is_file()  # each died once
    assert (tmp_path / "out/cpu/photo/done.txt").read_text() == "photo"
    assert (tmp_path / "out/gpu/photo/device.json").is_file()
    assert not list((tmp_path / "cache" / "entries").glob(".*"))  # no staging left behind
    v = CliRunner().invoke(verify_cmd, [str(tmp_path / "out")])
    assert v.exit_code == 0, v.output
