"""Shared pieces of the pipeline tests: small pure-numpy stages (no GPU), image files and
pipeline folders to bake. Also imported by bake subprocesses through
``[project] plugins = ["pipeline_helpers"]`` with ``tests/`` on PYTHONPATH."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bakery.formats.images import load_image
from bakery.stages import Param, Stage, StageResult, register

#: How many times each test stage ran in this process, by type name.
RUNS: dict[str, int] = {}


def _count(name: str) -> None:
    RUNS[name] = RUNS.get(name, 0) + 1


@register
class BlurStage(Stage):
    """Box-blurs one image: a cheap, deterministic stand-in for a real bake."""

    type_name = "test_blur"
    version = "1"
    uses_device = False
    params = (Param("radius", int, 1, min=0, max=8), Param("gain", float, 1.0, min=0.0, max=4.0))

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        img = load_image(inputs[0].files["image"])
        r = params["radius"]
        out = img.copy()
        if r:
            pad = np.pad(img, ((r, r), (r, r), (0, 0)), mode="edge")
            k = 2 * r + 1
            c = pad.cumsum(0).cumsum(1)
            c = np.pad(c, ((1, 0), (1, 0), (0, 0)))
            out = (c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]) / (k * k)
        out = np.clip(out * params["gain"], 0, 1)
        ctx.progress(1, 1)
        ctx.out.write_png("blurred.png", out)
        return StageResult(metrics={"mean": round(float(out.mean()), 6)})


@register
class SummaryStage(Stage):
    """Reads an upstream bundle (a stage input) and writes a digest of it."""

    type_name = "test_summary"
    reads_bundles = True
    version = "1"
    uses_device = False
    input_roles = ("image", "albedo")

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        src = inputs[0].bundle.files["blurred.png"]
        ctx.out.write_json("summary.json", {"sha256": hashlib.sha256(src).hexdigest()})
        return StageResult()


@register
class JoinStage(Stage):
    """Joins an asset with an upstream bundle of the same name: a stage of two inputs."""

    type_name = "test_join"
    reads_bundles = True
    version = "1"
    uses_device = False
    joins_inputs = True

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        source, upstream = inputs
        ctx.out.write_json("pair.json", {
            "asset": source.name, "roles": sorted(source.files),
            "upstream_stage": upstream.bundle.manifest["stage"]["type"],
            "upstream_files": sorted(n for n in upstream.bundle.files if n != "manifest.json")})
        return StageResult()


@register
class MaterialStage(Stage):
    """Averages every texture of a material: exercises multi-role assets."""

    type_name = "test_material"
    version = "1"
    uses_device = False
    input_roles = ("albedo", "normal", "roughness", "metalness", "ao", "height")

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        means = {role: float(load_image(p).mean()) for role, p in sorted(inputs[0].files.items())}
        ctx.out.write_json("means.json", means)
        return StageResult(metrics={"roles": len(means)})


@register
class FailStage(Stage):
    """Always raises, like a stage with a bug."""

    type_name = "test_fail"
    version = "1"
    uses_device = False

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        ctx.out.write_bytes("partial.bin", b"half")
        raise RuntimeError(f"boom on {inputs[0].name}")


@register
class SleepStage(Stage):
    """Writes part of its output, announces itself through $BAKERY_TEST_STARTED, then
    sleeps: a SIGKILL lands mid-task. With $BAKERY_TEST_RELEASE it instead holds until
    that file exists (at most a minute), so a test decides when the task ends."""

    type_name = "test_sleep"
    version = "1"
    uses_device = False
    params = (Param("seconds", float, 0.0, min=0.0, max=60.0), Param("tag", str, "a"))

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        ctx.out.write_bytes("data.txt", f"{inputs[0].name} {params['tag']}".encode())
        flag = os.environ.get("BAKERY_TEST_STARTED")
        if flag:
            Path(flag).write_text(inputs[0].name)
        release = os.environ.get("BAKERY_TEST_RELEASE")
        if release:
            deadline = time.monotonic() + 60.0
            while not Path(release).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        else:
            time.sleep(params["seconds"])
        return StageResult(metrics={"slept": params["seconds"]})


@register
class DeviceStage(Stage):
    """Asks the context for a device: proves the executor opens it lazily."""

    type_name = "test_device"
    version = "1"
    uses_device = True

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        ctx.out.write_json("device.json", {"class": ctx.device.device_class})
        return StageResult()


@register
class NoisyStage(Stage):
    """Writes one file that depends only on its input and one that differs on every run
    (as a stage summing floats in whatever order threads finish would): what
    ``bake --verify-determinism`` must catch."""

    type_name = "test_noisy"
    version = "1"
    uses_device = False

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        ctx.out.write_json("stable.json", {"asset": inputs[0].name})
        ctx.out.write_bytes("noise.bin", os.urandom(16))
        return StageResult()


@register
class DiesAgainStage(Stage):
    """Bakes in the bake's own process and kills the process of any second bake (a driver
    crash in the verifying process): --verify-determinism must say so in one line."""

    type_name = "test_dies_again"
    version = "1"
    uses_device = False

    def run(self, ctx, inputs, params):
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            os._exit(3)
        ctx.out.write_json("stable.json", {"asset": inputs[0].name})
        return StageResult()


@register
class ListStage(Stage):
    """Reads a text file naming other files, one per line: an asset that refers to files
    (as a fit spec does), through the ``referenced_files`` hook and a role of its own."""

    type_name = "test_list"
    version = "1"
    uses_device = False
    input_roles = ("list",)

    @classmethod
    def referenced_files(cls, files):
        lines = [line.strip() for line in Path(files["list"]).read_text().splitlines() if line.strip()]
        return {f"list.{i}": Path(files["list"]).parent / line for i, line in enumerate(lines)}

    def run(self, ctx, inputs, params):
        _count(self.type_name)
        files = inputs[0].files
        ctx.out.write_json("sizes.json", {r: Path(p).stat().st_size for r, p in sorted(files.items())})
        return StageResult()


def write_image(path: Path, seed: int = 0, size: int = 16) -> Path:
    """A small random RGB PNG."""
    from bakery.formats.images import encode_png

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    path.write_bytes(encode_png(rng.random((size, size, 3), dtype=np.float32)))
    return path


BASIC_TOML = """\
[project]
name = "test"
out = "out"
cache = "cache"
seed = 7
plugins = ["pipeline_helpers"]

[assets.photos]
image = "src/*.png"

[stages.blur]
type = "test_blur"
inputs = ["photos"]
params = { radius = 1 }

[stages.summary]
type = "test_summary"
inputs = ["stage:blur"]
"""


#: One slow task per image (a template: ``seconds`` and ``tag``), for kill and lock tests.
SLEEP_TOML = """\
[project]
out = "out"
cache = "cache"
plugins = ["pipeline_helpers"]

[assets.photos]
image = "src/*.png"

[stages.slow]
type = "test_sleep"
inputs = ["photos"]
params = {{ seconds = {seconds}, tag = "{tag}" }}
"""


def make_project(root: Path, toml: str = BASIC_TOML, images=("a", "b", "c")) -> Path:
    """A pipeline folder with ``src/<name>.png`` images; returns the pipeline file."""
    for i, name in enumerate(images):
        write_image(root / "src" / f"{name}.png", seed=i)
    p = root / "pipeline.toml"
    p.write_text(toml)
    return p


def tree_snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (for byte-identical checks)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def sha256_hex(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def bake_until_started(root: Path, env: dict, *args: str, timeout: float = 60.0) -> subprocess.Popen:
    """Starts ``python -m bakery bake pipeline.toml *args`` in ``root`` and returns once a
    task has touched ``env["BAKERY_TEST_STARTED"]``: signal tests need a bake caught mid-task.
    Fails (with the bake's output) if the bake ends first or the task never starts."""
    started = Path(env["BAKERY_TEST_STARTED"])
    p = subprocess.Popen([sys.executable, "-m", "bakery", "bake", "pipeline.toml", *args], cwd=root, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not started.exists():
        assert p.poll() is None and time.monotonic() - t0 < timeout, p.communicate()
        time.sleep(0.02)
    return p
