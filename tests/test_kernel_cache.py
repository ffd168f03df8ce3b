"""Kernels compile once per process: the tasks of one stage in one process (the local
runner, a ``--jobs`` worker) reuse the first task's modules and kernels, a worker keeps
its process and its device across tasks, and Slang's compiled shaders persist under the
bake's cache for the next process. Counted through ``Device.kernel_cache``, never timed."""

from __future__ import annotations

import json
import logging

from click.testing import CliRunner

from bakery.pipeline.cache import Cache
from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.config import load_pipeline
from bakery.pipeline.planner import plan
from bakery.pipeline.runner import LocalRunner
from bakery.pipeline.worker import DevicePool

from pipeline_helpers import make_project

TEXTURE_TOML = """\
[project]
out = "out"
cache = "cache"
seed = 3

[assets.photos]
image = "src/*.png"

[stages.texture]
type = "neural_texture"
inputs = ["photos"]
params = { steps = 4, batch = 256, width = 16, layers = 2 }
"""

KERNEL_TOML = """\
[project]
out = "out"
cache = "cache"
plugins = ["kernel_stages"]

[assets.photos]
image = "src/*.png"

[stages.ramp]
type = "test_kernel"
inputs = ["photos"]
"""


def test_the_second_task_of_a_stage_compiles_and_links_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, TEXTURE_TOML, images=("a", "b"))
    pipe = load_pipeline(tmp_path / "pipeline.toml")
    first, second = plan(pipe)
    devices = DevicePool(pipe.cache / "device")
    runner = LocalRunner(Cache(pipe.cache), devices, logging.getLogger("test"))

    assert [e.kind for e in runner.run([first])] == ["started", "built"]
    (dev,) = devices.opened.values()
    after_first = dev.kernel_cache.to_dict()
    assert after_first["modules"] >= 1 and after_first["kernels"] >= 1

    assert [e.kind for e in runner.run([second])] == ["started", "built"]
    after_second = dev.kernel_cache.to_dict()
    assert list(devices.opened.values()) == [dev]  # the same device, not reopened
    assert after_second["modules"] == after_first["modules"]  # no Slang front end ran again
    assert after_second["kernels"] == after_first["kernels"]  # nothing linked again
    assert after_second["hits"] >= after_first["hits"] + after_first["kernels"]


def test_a_jobs_worker_keeps_its_process_device_and_kernels_across_tasks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = ("a", "b", "c", "d")
    make_project(tmp_path, KERNEL_TOML, images=names)
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--jobs", "2"])
    assert r.exit_code == 0, r.output
    records = [json.loads((tmp_path / "out" / "ramp" / "photos" / n / "kernel.json").read_text()) for n in names]
    assert all(rec["sum"] == 2.0 * sum(range(32)) for rec in records)  # the kernel ran
    by_worker: dict[int, list[dict]] = {}
    for rec in records:
        by_worker.setdefault(rec["pid"], []).append(rec)
    assert len(by_worker) <= 2 and max(len(v) for v in by_worker.values()) >= 2  # workers took several tasks
    for recs in by_worker.values():
        assert len({rec["device"] for rec in recs}) == 1  # one device per worker, never reopened
        # Every task of a worker saw one module and one kernel: the first compiled them.
        assert all(rec["kernel_cache"]["modules"] == 1 and rec["kernel_cache"]["kernels"] == 1 for rec in recs)
        assert sorted(rec["kernel_cache"]["hits"] for rec in recs) == list(range(len(recs)))
    # The workers' devices keep Slang's compiled shaders under the bake's cache, for the next process.
    assert any(p.is_file() for p in (tmp_path / "cache" / "device" / "shaders").rglob("*"))
