"""Runners other than the in-process one: --jobs (worker processes), choosing a runner,
and the cache's one sealing step under several writers. The Ray runner's own tests are
in test_pipeline_ray.py."""

import json
import logging
import sys
import threading

import pytest
from click.testing import CliRunner

from pipeline_helpers import BASIC_TOML, make_project, tree_snapshot

from bakery.errors import UsageError
from bakery.pipeline.cache import Cache
from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.worker import write_tree

CRASH_TOML = BASIC_TOML.replace('plugins = ["pipeline_helpers"]', 'plugins = ["pipeline_helpers", "runner_stages"]') + """
[stages.crash]
type = "test_crash_once"
inputs = ["photos"]
params = { marker = "MARKER" }
"""


def bake(*args, code=0):
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", *args])
    assert r.exit_code == code, r.output
    return r


def outputs(root):
    return {k: v for k, v in tree_snapshot(root / "out").items()
            if not k.startswith("logs/") and k not in ("bake-report.json", "report.html")}


def statuses(root):
    report = json.loads((root / "out" / "bake-report.json").read_text())
    return {f"{t['stage']}/{t['asset']}": t["status"] for t in report["tasks"]}


def test_put_with_two_writers_of_one_key_seals_one_entry(tmp_path):
    cache = Cache(tmp_path / "cache")
    both_staged = threading.Barrier(2)
    returned = {}

    def writer(tag):
        def write(folder):
            write_tree({"data.txt": tag.encode(), "manifest.json": b"{}"}, folder)
            both_staged.wait()  # neither has renamed its entry in yet
        returned[tag] = cache.put("k" * 64, write)

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.check("k" * 64).state == "ok"
    assert returned["first"] == returned["second"] == cache.sums("k" * 64)  # both report the one entry
    assert sorted(p.name for p in (tmp_path / "cache" / "entries").iterdir()) == ["k" * 64]  # no leftovers


def test_put_replaces_an_incomplete_entry_and_replace_forces(tmp_path):
    cache = Cache(tmp_path / "cache")
    key = "a" * 64
    cache.bundle_dir(key).mkdir(parents=True)
    (cache.bundle_dir(key) / "half.bin").write_bytes(b"killed before sums.json")
    sums = cache.put(key, lambda f: write_tree({"x": b"new"}, f))
    assert cache.check(key).state == "ok" and set(sums) == {"x"}
    assert cache.put(key, lambda f: write_tree({"y": b"other"}, f)) == sums  # a sealed entry stays
    assert set(cache.put(key, lambda f: write_tree({"y": b"other"}, f), replace=True)) == {"y"}


def test_jobs_gives_the_local_bytes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path)
    bake()
    local = outputs(tmp_path)
    r = bake("--force", "--jobs", "2")
    assert "6 tasks: 6 built" in r.output
    assert outputs(tmp_path) == local
    assert (tmp_path / "out/logs/blur/photos/a.log").is_file()
    assert "6 tasks: 0 built, 6 cached" in bake("--jobs", "2").output


def test_jobs_retries_a_task_whose_worker_died(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, CRASH_TOML.replace("MARKER", str(tmp_path / "died-{}")), images=("a",))
    # one marker per asset: the stage's param is the same for every asset, so use one asset
    r = bake("--jobs", "2")
    assert "3 tasks: 3 built" in r.output, r.output
    assert (tmp_path / "died-{}").is_file()
    assert (tmp_path / "out/crash/photos/a/done.txt").read_text() == "photos/a"


def test_jobs_gives_up_after_max_retries(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, CRASH_TOML.replace("MARKER", str(tmp_path / "died")), images=("a",))
    r = bake("--jobs", "2", "--max-retries", "0", code=1)
    assert statuses(tmp_path)["crash/photos/a"] == "failed"
    assert "worker lost" in r.output
    assert not (tmp_path / "out/crash").exists()  # nothing half-published


def test_runner_ray_without_ray_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    r = bake("--runner", "ray", code=2)
    assert r.output.strip().splitlines() == ["error: --runner: --runner ray needs Ray: pip install 'bakery[ray]' "
                                             "(or pip install 'ray>=2.9')"]
    assert not (tmp_path / "out" / "blur").exists()
    bake("--runner", "ray", "--dry-run", code=3)  # planning needs no cluster


@pytest.mark.parametrize("value,message", [('"slurm"', "unknown runner 'slurm' (allowed: local, ray)"),
                                           ("3", "expected a string, got 3")])
def test_project_runner_is_validated(tmp_path, monkeypatch, value, message):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, BASIC_TOML.replace('seed = 7', f'seed = 7\nrunner = {value}'))
    r = bake(code=2)
    assert f"pipeline.toml:6: project.runner: {message}" in r.output


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_jobs_must_be_positive_or_auto(tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path)
    assert f"'{value}' is not a whole number of at least 1 or 'auto'" in bake("--jobs", value, code=2).output


GPU, LAVAPIPE = "vulkan:NVIDIA H200", "vulkan:llvmpipe (LLVM 15.0.6, 256 bits)"


GIB = 1 << 30


@pytest.mark.parametrize("classes,cpus,memory,jobs", [
    ([GPU] * 20, 16, 141 * GIB, 8),   # an H200: one worker per two cores, at most 8
    ([GPU] * 20, 6, 141 * GIB, 3),
    ([GPU] * 20, 32, 80 * GIB, 6),    # an 80 GiB card: as many as its memory holds
    ([GPU] * 20, 32, 24 * GIB, 2),
    ([GPU] * 20, 32, 8 * GIB, 1),
    ([GPU] * 2, 16, 141 * GIB, 2),    # no more workers than tasks to build
    ([GPU], 16, 141 * GIB, 1),        # one task: no pool at all
    ([GPU] * 4, 1, 141 * GIB, 1),
    ([LAVAPIPE] * 20, 16, 24 * GIB, 1),  # lavapipe spreads one task over every core already
    ([None] * 20, 16, 141 * GIB, 1),  # stages that open no device
    ([None, None, GPU], 16, 141 * GIB, 3),  # CPU-only tasks run beside the GPU's
])
def test_auto_jobs_pools_only_where_a_gpu_trains(classes, cpus, memory, jobs):
    from bakery.pipeline.pool_runner import auto_jobs

    assert auto_jobs(classes, cpus=cpus, gpu_bytes=memory) == jobs


def test_auto_jobs_reads_the_gpus_memory_from_its_driver(monkeypatch):
    """Without a figure given, the memory is the named GPU's largest device-local heap as
    the Vulkan driver lists it (lavapipe's, on this machine: it lists one); a GPU the driver
    does not list gets UNKNOWN_MEMORY_JOBS."""
    from bakery import vulkan_probe
    from bakery.pipeline import pool_runner

    lavapipe = next((d for d in vulkan_probe.physical_devices() if "llvmpipe" in d.name), None)
    if lavapipe is None:
        pytest.skip("needs lavapipe listed by the Vulkan loader")
    assert lavapipe.memory_bytes and lavapipe.memory_bytes > 256 << 20
    assert pool_runner.gpu_memory(f"vulkan:{lavapipe.name}") == lavapipe.memory_bytes
    monkeypatch.setattr(pool_runner, "gpu_memory", lambda c: 40 * GIB if c == GPU else None)
    assert pool_runner.auto_jobs([GPU] * 20, cpus=64) == 3
    assert pool_runner.auto_jobs(["vulkan:Unlisted GPU"] * 20, cpus=64) == pool_runner.UNKNOWN_MEMORY_JOBS


def test_jobs_auto_on_this_machine_bakes_in_process_and_a_pool_gives_the_same_bytes(tmp_path, monkeypatch):
    """auto (the default) on lavapipe: no worker processes; forcing the GPU's answer
    runs the same tasks in a pool and writes the same outputs."""
    from bakery.pipeline import pool_runner

    made = []
    real_backend = pool_runner.PoolBackend
    monkeypatch.setattr(pool_runner, "PoolBackend", lambda *a, **k: made.append(a[0]) or real_backend(*a, **k))
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path)
    bake()
    assert made == []
    local = outputs(tmp_path)
    monkeypatch.setattr(pool_runner, "auto_jobs", lambda classes, cpus=None, gpu_bytes=None: 2)
    assert "6 tasks: 6 built" in bake("--force").output
    assert made == [2]
    assert outputs(tmp_path) == local


class FakeBackend:
    """Runs nothing: records what the dispatcher submits and ends jobs when told to."""

    def __init__(self, slots):
        self.slots, self.running, self.submitted, self.closed = slots, [], [], None

    def can_take(self, spec):
        return len(self.running) < self.slots

    def submit(self, job):
        self.running.append(job)
        self.submitted.append((job.spec.id, [j.spec.id for j in self.running]))

    def wait(self):
        from bakery.pipeline.worker import Attempt

        job = self.running.pop(0)
        return [(job, Attempt(job.spec.id, "failed", error=f"{job.spec.id}: no worker here"))]

    def close(self, *, cancel):
        self.closed = cancel


def _specs(tmp_path, monkeypatch):
    from bakery.pipeline.config import load_pipeline
    from bakery.pipeline.planner import plan

    monkeypatch.chdir(tmp_path)
    return plan(load_pipeline(make_project(tmp_path)))


def test_dispatch_runs_independent_tasks_at_once_and_follows_the_dag(tmp_path, monkeypatch):
    from bakery.pipeline.dispatch import DagRunner

    specs = _specs(tmp_path, monkeypatch)
    backend = FakeBackend(slots=3)
    events = list(DagRunner(Cache(tmp_path / "cache"), backend, logging.getLogger("t")).run(specs))
    # the three blur tasks are in flight together; the summaries wait for them and are skipped
    assert backend.submitted[2] == ("blur/photos/c", ["blur/photos/a", "blur/photos/b", "blur/photos/c"])
    assert [e.kind for e in events if e.task.startswith("summary")] == ["skipped"] * 3
    assert backend.closed is False


def test_critical_path_first_starts_the_longest_chain_of_builds_first():
    from bakery.pipeline.dag import critical_path_first

    deps = {"short": [], "head": [], "tail": ["head"], "long": [], "tie": []}
    cost = {"short": 1.0, "head": 2.0, "tail": 9.0, "long": 10.0, "tie": 10.0}.__getitem__
    # head leads to tail: its chain is 11, longer than long's 10 alone; long and tie tie, in declaration order
    assert critical_path_first(deps, cost) == ["head", "long", "tie", "tail", "short"]
    with pytest.raises(UsageError, match="cycle"):
        critical_path_first({"a": ["b"], "b": ["a"]}, cost)


def test_dispatch_hands_out_the_slowest_recorded_tasks_first(tmp_path, monkeypatch):
    """A worker freed late on a slow task sets a bake's wall time: the slowest task by its
    last build goes first, one never built goes by its stage's recorded mean."""
    from bakery.pipeline.dispatch import DagRunner

    specs = _specs(tmp_path, monkeypatch)
    cache = Cache(tmp_path / "cache")
    cache.write_record("blur", "photos/a", "old-key", {}, build_seconds=5.0)
    cache.write_record("blur", "photos/b", "old-key", {}, build_seconds=50.0)
    backend = FakeBackend(slots=1)
    list(DagRunner(cache, backend, logging.getLogger("t")).run(specs))
    # b (50 s) before c (never built: the stage's mean, 27.5 s) before a (5 s)
    assert [task for task, _ in backend.submitted] == ["blur/photos/b", "blur/photos/c", "blur/photos/a"]


def test_dispatch_runs_stage_types_side_by_side_in_proportion_to_their_work(tmp_path, monkeypatch):
    """A library (16 materials through three stages) with eight workers: not one stage at a
    time (ntc's host-bound stretch left the GPU half idle), but each type on a share of the
    workers in proportion to its expected seconds (neural_material 40, ntc 25, mipmap 10
    a task), so they overlap while they last and the shortest go last."""
    import dataclasses
    from collections import Counter

    from bakery.pipeline.dispatch import DagRunner

    template = _specs(tmp_path, monkeypatch)[0]
    specs = [dataclasses.replace(template, id=f"{t}/lib/m{i:03d}", stage=t, stage_type=t, asset=f"lib/m{i:03d}",
                                 key=f"{t}{i:03d}".ljust(64, "0"), deps=())
             for t in ("ntc", "mipmap", "neural_material") for i in range(16)]
    backend = FakeBackend(slots=8)
    events = list(DagRunner(Cache(tmp_path / "cache"), backend, logging.getLogger("t")).run(specs))
    assert Counter(e.kind for e in events) == Counter(started=48, failed=48)
    types = [task.split("/")[0] for task, _ in backend.submitted]
    assert Counter(types[:8]) == Counter(neural_material=4, ntc=3, mipmap=1)   # 640 : 400 : 160 s of work
    assert types[0] == "neural_material"                                       # the longest first
    # every round of eight hand-outs mixes the three, until neural_material's queue is done
    assert all(len(set(types[r:r + 8])) == 3 for r in range(0, 32, 8))
    assert types[-6:] == ["mipmap"] * 6                                        # the shortest tasks last


def test_shares_never_hold_back_a_task_others_wait_for(tmp_path, monkeypatch):
    """Shares pick among tasks nothing waits for; a task with dependants keeps its place by
    its chain: a mipmap (10 s) that a neural_material (40 s) reads starts first, though
    sixteen ntc tasks (25 s each) hold almost all the unfinished work."""
    import dataclasses

    from bakery.pipeline.dispatch import DagRunner

    template = _specs(tmp_path, monkeypatch)[0]

    def spec(t, i, deps=()):
        return dataclasses.replace(template, id=f"{t}/lib/m{i:03d}", stage=t, stage_type=t, asset=f"lib/m{i:03d}",
                                   key=f"{t}{i:03d}".ljust(64, "0"), deps=deps)

    specs = [spec("ntc", i) for i in range(16)] + [spec("mipmap", 0), spec("neural_material", 0, ("mipmap/lib/m000",))]
    backend = FakeBackend(slots=2)
    list(DagRunner(Cache(tmp_path / "cache"), backend, logging.getLogger("t")).run(specs))
    assert backend.submitted[0][0] == "mipmap/lib/m000"


def test_dispatch_of_many_chains_starts_each_task_once_after_its_upstream(tmp_path, monkeypatch):
    """The ready set kept as tasks settle (dispatch.ReadyTasks): 200 chains mipmap -> ntc
    -> neural_material through 8 slots, every task started once, after its upstream
    task ended."""
    import dataclasses

    from bakery.pipeline.dispatch import DagRunner
    from bakery.pipeline.runner import Event
    from bakery.pipeline.worker import Attempt

    template = _specs(tmp_path, monkeypatch)[0]
    specs = []
    for i in range(200):
        upstream = ()
        for t in ("mipmap", "ntc", "neural_material"):
            specs.append(dataclasses.replace(template, id=f"{t}/lib/m{i:03d}", stage=t, stage_type=t,
                                             asset=f"lib/m{i:03d}", key=f"{t}{i:03d}".ljust(64, "0"), deps=upstream))
            upstream = (specs[-1].id,)

    class Builds(FakeBackend):
        def wait(self):
            job = self.running.pop(0)
            return [(job, Attempt(job.spec.id, "built", sums={}))]

    backend = Builds(slots=8)
    runner = DagRunner(Cache(tmp_path / "cache"), backend, logging.getLogger("t"))
    monkeypatch.setattr(runner, "_finish", lambda job, result: Event("built", job.spec.id))
    by_id, ended, started = {s.id: s for s in specs}, set(), []
    for e in runner.run(specs):
        if e.kind == "started":
            assert all(d in ended for d in by_id[e.task].deps), e.task
            started.append(e.task)
        else:
            ended.add(e.task)
    assert sorted(started) == sorted(s.id for s in specs) and len(ended) == len(specs)


def test_dispatch_cancels_the_backend_when_the_bake_is_interrupted(tmp_path, monkeypatch):
    from bakery.pipeline.dispatch import DagRunner

    backend = FakeBackend(slots=2)
    events = DagRunner(Cache(tmp_path / "cache"), backend, logging.getLogger("t")).run(_specs(tmp_path, monkeypatch))
    assert next(events).kind == "started"
    events.close()  # what the executor does on Ctrl-C
    assert backend.closed is True
