"""The planner/runner split: specs are pure data with honest keys, planning opens no
device, the local runner's events, joins of several inputs, and a spec that builds the
same bundle in another process."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import bakery
from bakery.pipeline.cache import Cache
from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.config import load_pipeline
from bakery.pipeline.fingerprint import code_closure, fingerprint_of, package_root, stage_start
from bakery.pipeline.ownership import claim_dir
from bakery.pipeline.planner import plan
from bakery.pipeline.runner import LocalRunner
from bakery.pipeline.spec import TaskSpec
from bakery.pipeline.worker import DevicePool, build
from bakery.stages import get_stage

from pipeline_helpers import BASIC_TOML, make_project, tree_snapshot, write_image

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path, monkeypatch):
    make_project(tmp_path, BASIC_TOML)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- code fingerprints ---------------------------------------------------------------
def test_ntc_closure_follows_includes_and_python_that_generates_slang():
    root = package_root()
    names = {p.relative_to(root).as_posix() for p in code_closure(stage_start(get_stage("ntc")))}
    # adam_math.slang and fixed_point.slang are reached only through #include lines
    for needed in ("nn/adam_math.slang", "nn/fixed_point.slang", "nn/mlp_coopvec.slang",
                   "stages/ntc/latent_grid.slang", "nn/codegen.py", "nn/trainer.py", "formats/bundle.py"):
        assert needed in names
    assert not any(n.startswith("pipeline/") for n in names)  # orchestration shapes no output
    assert "stages/neural_texture/stage.py" not in names      # another stage's code is not ours


def test_imports_nested_in_functions_branches_and_handlers_are_followed():
    from bakery.pipeline.fingerprint import _imported_modules

    source = b"""
import os, bakery.a
class C:
    def f(self):
        if x:
            from bakery import b
        else:
            from .c import d
        try:
            import bakery.e
        except ImportError:
            import bakery.g
        finally:
            from ..h import i
match y:
    case 1:
        import bakery.j
x = [__import__("bakery.not_a_statement")]
"""
    assert set(_imported_modules(source, "bakery.stages.s")) == {
        "bakery.a", "bakery", "bakery.b", "bakery.stages.s.c", "bakery.stages.s.c.d", "bakery.e", "bakery.g",
        "bakery.stages.h", "bakery.stages.h.i", "bakery.j"}


@pytest.mark.parametrize("touched", ["nn/adam_math.slang", "nn/fixed_point.slang", "nn/activations.slang",
                                     "stages/ntc/latent_grid.slang", "nn/codegen.py", "stages/ntc/rate.py"])
def test_touching_any_included_file_changes_the_key(tmp_path, touched):
    copy = tmp_path / "bakery"
    shutil.copytree(package_root(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    start = copy / "stages" / "ntc"
    before = fingerprint_of(start, copy)
    with open(copy / touched, "a") as f:
        f.write("\n// touched\n" if touched.endswith(".slang") else "\n# touched\n")
    assert fingerprint_of(start, copy) != before


@pytest.mark.parametrize("touched", ["pipeline/executor.py", "reporting.py"])
def test_touching_the_orchestration_or_the_reports_drawing_keeps_the_key(tmp_path, touched):
    copy = tmp_path / "bakery"
    shutil.copytree(package_root(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = {name: fingerprint_of(copy / "stages" / name, copy) for name in ("ntc", "procedural", "mipmap")}
    with open(copy / touched, "a") as f:
        f.write("\n# touched\n")
    assert {name: fingerprint_of(copy / "stages" / name, copy) for name in before} == before


@pytest.mark.parametrize("change", ["edit an included file", "add a file to the stage's folder", "damage the memo"])
def test_a_fingerprint_memo_is_taken_only_while_its_files_are_as_they_were(tmp_path, change):
    copy = tmp_path / "bakery"
    shutil.copytree(package_root(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    start, memo = copy / "stages" / "ntc", claim_dir(tmp_path / "records", tmp_path) / "memo.json"
    first = fingerprint_of(start, copy, memo)
    assert first == fingerprint_of(start, copy) and memo.is_file()
    kept = json.loads(memo.read_text())
    (entry,) = kept.values()
    assert str((copy / "nn" / "adam_math.slang").resolve()) in entry["files"]
    entry["digest"] = "taken from the memo"       # a valid entry is answered without hashing
    memo.write_text(json.dumps(kept))
    assert fingerprint_of(start, copy, memo) == "taken from the memo"
    if change == "edit an included file":
        with open(copy / "nn" / "adam_math.slang", "a") as f:
            f.write("\n// touched\n")
    elif change == "add a file to the stage's folder":
        (start / "extra.py").write_text("X = 1\n")
    else:
        memo.write_text("{not json")
    again = fingerprint_of(start, copy, memo)
    assert again == fingerprint_of(start, copy) != "taken from the memo"
    assert (again != first) == (change != "damage the memo")


def test_a_fingerprint_memo_is_written_only_into_a_folder_bakery_owns_and_never_through_a_link(tmp_path):
    start = package_root() / "stages" / "mipmap"
    persons = tmp_path / "persons"
    persons.mkdir()
    assert fingerprint_of(start, package_root(), persons / "memo.json") == fingerprint_of(start, package_root())
    assert list(persons.iterdir()) == []          # a folder bakery did not make gets no memo
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"forged": {"digest": "x"}}))
    memo = claim_dir(tmp_path / "records", tmp_path) / "memo.json"
    memo.symlink_to(elsewhere)
    assert fingerprint_of(start, package_root(), memo) == fingerprint_of(start, package_root())
    assert json.loads(elsewhere.read_text()) == {"forged": {"digest": "x"}}


# -- the planner -----------------------------------------------------------------------
def test_specs_are_plain_data_that_survive_json(project):
    specs = plan(load_pipeline(project / "pipeline.toml"))
    assert [s.id for s in specs][:3] == ["blur/photos/a", "blur/photos/b", "blur/photos/c"]
    for s in specs:
        again = TaskSpec.from_dict(json.loads(json.dumps(s.to_dict())))
        assert again == s and len(s.key) == 64
    summary = next(s for s in specs if s.stage == "summary")
    blur = next(s for s in specs if s.id == summary.deps[0])
    assert summary.inputs[0].upstream_key == blur.key


def test_planning_a_device_stage_opens_no_device(project, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("device opened while planning")

    monkeypatch.setattr("bakery.device.open_device", boom)
    (project / "pipeline.toml").write_text(BASIC_TOML + '\n[stages.dev]\ntype = "test_device"\ninputs = ["photos"]\n')
    specs = plan(load_pipeline(project / "pipeline.toml"))
    dev = [s for s in specs if s.stage == "dev"]
    assert dev and all(s.device == "auto" and s.device_class for s in dev)
    assert all(s.device is None for s in specs if s.stage == "blur")


AUTO_TOML = BASIC_TOML + '\n[stages.tex]\ntype = "neural_texture"\ninputs = ["photos"]\n'


def _plan_on(project, monkeypatch, adapter: str, toml: str = AUTO_TOML) -> dict:
    """The ``tex`` specs by asset, planned as if ``adapter`` were the device's."""
    monkeypatch.setattr("bakery.device.probe_device_class", lambda kind: f"vulkan:{adapter}")
    (project / "pipeline.toml").write_text(toml)
    return {s.asset: s for s in plan(load_pipeline(project / "pipeline.toml")) if s.stage == "tex"}


def test_auto_params_resolve_in_the_planner_before_keying(project, monkeypatch):
    """``auto`` means the device class's preset, sized by the input's header, and the key,
    the spec a worker runs and the dry run all carry those values."""
    from bakery.device import probe_device_class
    from bakery.pipeline.cache import why_rebuild
    from bakery.stages.neural_texture.stage import PRESETS
    from bakery.stages.params import Settings, preset_class

    here = preset_class(probe_device_class("auto"))  # what a bake in a subprocess plans for
    lavapipe = "llvmpipe (LLVM 15.0.6, 256 bits)"
    cpu = _plan_on(project, monkeypatch, lavapipe)["photos/a"]
    gpu = _plan_on(project, monkeypatch, "NVIDIA H200")["photos/a"]
    for spec, dclass in ((cpu, "cpu"), (gpu, "gpu")):
        settings = Settings.from_dict(spec.settings)
        preset = PRESETS.table[dclass]["production"]
        assert settings.device_class == dclass and settings.auto == ["batch", "layers", "steps", "width"]
        assert (settings["steps"], settings["width"]) == (preset["steps"], preset["width"])
        assert settings["batch"] == min(preset["batch"], 256)   # a 16x16 image: no batch beyond its texels
        assert spec.parts["params"] == dict(settings.values) and spec.parts["given"]["steps"] == "auto"
    assert cpu.key != gpu.key
    # an explicit value equal to the preset runs the same values, but the manifest's params differ
    steps = PRESETS.table["cpu"]["production"]["steps"]
    pinned = _plan_on(project, monkeypatch, lavapipe, AUTO_TOML + f"params = {{ steps = {steps} }}\n")["photos/a"]
    assert Settings.from_dict(pinned.settings).values == Settings.from_dict(cpu.settings).values
    assert pinned.key != cpu.key and why_rebuild(cpu.parts, pinned.parts) == "params changed (steps)"
    (project / "pipeline.toml").write_text(AUTO_TOML)
    r = _bake_cli(project, "--dry-run", "--only", "tex")
    assert r.returncode == 3, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("tex "))
    preset = PRESETS.table[here]["production"]
    assert f"new; batch=256 layers={preset['layers']} steps={preset['steps']} width={preset['width']}" in row


def test_an_unreadable_input_the_presets_read_fails_its_task_only(project, monkeypatch):
    (project / "src" / "b.png").write_bytes(b"\x89PNG broken")
    specs = _plan_on(project, monkeypatch, "llvmpipe")
    assert "b.png" in specs["photos/b"].error and "image" in specs["photos/b"].error
    assert not specs["photos/a"].error and specs["photos/a"].key


LIST_TOML = """\
[project]
out = "out"
cache = "cache"
plugins = ["pipeline_helpers"]

[assets.lists]
list = "src/*.txt"

[stages.sizes]
type = "test_list"
inputs = ["lists"]
"""


def test_files_an_asset_refers_to_come_from_its_stage(tmp_path, monkeypatch):
    """A plugin stage brings its own role and the files its asset refers to: they feed
    the task's key, --changed and the stage's inputs, with no line of pipeline/ naming it."""
    from bakery.pipeline.graph import build_tasks, select_tasks

    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "one.txt").write_text("data/a.bin\n")
    (tmp_path / "src" / "data").mkdir()
    (tmp_path / "src" / "data" / "a.bin").write_bytes(b"12345")
    (tmp_path / "pipeline.toml").write_text(LIST_TOML)
    pipe = load_pipeline(tmp_path / "pipeline.toml")
    (spec,) = plan(pipe)
    assert spec.inputs[0].files == {"list": str(tmp_path / "src" / "one.txt"),
                                    "list.0": str(tmp_path / "src" / "data" / "a.bin")}
    changed = select_tasks(pipe, build_tasks(pipe), changed=[tmp_path / "src" / "data" / "a.bin"])
    assert [t.id for t in changed] == ["sizes/lists/one"]
    (tmp_path / "src" / "data" / "a.bin").write_bytes(b"123456")
    assert plan(pipe)[0].key != spec.key
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml"])
    assert r.exit_code == 0, r.output
    sizes = json.loads((tmp_path / "out" / "sizes" / "lists" / "one" / "sizes.json").read_text())
    assert sizes == {"list": 11, "list.0": 6}


def _subprocess_env(**extra: str) -> dict:
    """This environment with the checkout and tests/ first on PYTHONPATH; what was there
    stays (on the GPU machine .device/setup.sh puts slangpy and the carried wheels there)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), str(REPO / "tests"),
                                                                   os.environ.get("PYTHONPATH", "")) if p), **extra)


def _bake_cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    code = "from bakery.pipeline.cli import bake_cmd; bake_cmd()"
    full_env = _subprocess_env(**(env or {}))
    return subprocess.run([sys.executable, "-c", code, "pipeline.toml", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=120)


def test_dry_run_works_without_a_vulkan_loader(project, tmp_path_factory):
    """A dry run never opens a device: with the loader unloadable it still plans, and
    exits 3 (something would build)."""
    broken = tmp_path_factory.mktemp("no-vulkan")
    (broken / "libvulkan.so.1").write_bytes(b"")  # found first, and not a library
    (project / "pipeline.toml").write_text(BASIC_TOML + '\n[stages.dev]\ntype = "test_device"\ninputs = ["photos"]\n'
                                           '[stages.tex]\ntype = "neural_texture"\ninputs = ["photos"]\n')
    before = tree_snapshot(project)
    search = os.pathsep.join(p for p in (str(broken), os.environ.get("LD_LIBRARY_PATH", "")) if p)
    r = _bake_cli(project, "--dry-run", env={"LD_LIBRARY_PATH": search})
    assert r.returncode == 3, r.stderr
    assert "tex" in r.stdout and "would-build" in r.stdout
    assert tree_snapshot(project) == before


def test_dry_run_exits_0_when_everything_is_cached(project):
    assert CliRunner().invoke(bake_cmd, ["pipeline.toml"]).exit_code == 0
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--dry-run"])
    assert r.exit_code == 0 and "would-build" not in r.output


# -- the runner ------------------------------------------------------------------------
def test_local_runner_yields_lifecycle_events(project):
    (project / "pipeline.toml").write_text(BASIC_TOML.replace('type = "test_blur"', 'type = "test_fail"', 1)
                                           .replace("params = { radius = 1 }\n", ""))
    pipe = load_pipeline(project / "pipeline.toml")
    specs = plan(pipe)
    runner = LocalRunner(Cache(pipe.cache), DevicePool(), logging.getLogger("test"))
    events = [(e.kind, e.task) for e in runner.run(specs)]
    assert ("started", "blur/photos/a") in events and ("failed", "blur/photos/a") in events
    assert ("skipped", "summary/photos/a") in events
    assert all(kind != "built" for kind, task in events if task.startswith("summary"))


def test_second_run_is_all_cached_events(project):
    pipe = load_pipeline(project / "pipeline.toml")
    specs = plan(pipe)
    first = [e.kind for e in LocalRunner(Cache(pipe.cache), DevicePool(), logging.getLogger("t")).run(specs)]
    assert first.count("built") == len(specs) and first.count("started") == len(specs)
    second = [e.kind for e in LocalRunner(Cache(pipe.cache), DevicePool(), logging.getLogger("t")).run(specs)]
    assert second == ["cached"] * len(specs)


def test_a_spec_builds_the_same_bundle_in_another_process(project, tmp_path_factory):
    pipe = load_pipeline(project / "pipeline.toml")
    spec = plan(pipe)[0]
    here = Cache(tmp_path_factory.mktemp("cache-here"))
    sums_here = build(spec, here, DevicePool(), log=logging.getLogger("t"))
    there = tmp_path_factory.mktemp("cache-there")
    code = ("import json, sys, logging\n"
            "from bakery.pipeline.cache import Cache\n"
            "from bakery.pipeline.spec import TaskSpec\n"
            "from bakery.pipeline.worker import DevicePool, build\n"
            "spec = TaskSpec.from_dict(json.loads(sys.stdin.read()))\n"
            f"print(json.dumps(build(spec, Cache({str(there)!r}), DevicePool(), log=logging.getLogger('w'))))\n")
    r = subprocess.run([sys.executable, "-c", code], input=json.dumps(spec.to_dict()), text=True,
                       capture_output=True, env=_subprocess_env(), cwd=project, timeout=120)
    assert r.returncode == 0, r.stderr
    sums_there = json.loads(r.stdout)
    assert sums_there == {k: list(v) for k, v in sums_here.items()}  # manifest included
    assert spec.plugins == ("pipeline_helpers",)  # the worker imported them from the spec


# -- several inputs ----------------------------------------------------------------------
JOIN_TOML = BASIC_TOML + '''
[stages.pair]
type = "test_join"
inputs = ["photos", "stage:blur"]
'''


def test_a_joining_stage_gets_one_input_from_each_declared_input(project):
    (project / "pipeline.toml").write_text(JOIN_TOML)
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml"])
    assert r.exit_code == 0, r.output
    got = json.loads((project / "out/pair/photos/a/pair.json").read_text())
    assert got == {"asset": "photos/a", "roles": ["image"], "upstream_stage": "test_blur",
                   "upstream_files": ["blurred.png"]}
    # editing the source rebuilds the join (directly and through blur)
    write_image(project / "src" / "a.png", seed=9)
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml"])
    rep = json.loads((project / "out" / "bake-report.json").read_text())
    assert {t["stage"] + "/" + t["asset"]: t["status"] for t in rep["tasks"]}["pair/photos/a"] == "built"


def test_joined_inputs_must_hold_the_same_assets(project):
    write_image(project / "other" / "a.png", seed=3)
    (project / "pipeline.toml").write_text(BASIC_TOML + """
[assets.others]
image = "other/*.png"

[stages.pair]
type = "test_join"
inputs = ["others", "stage:blur"]
""")
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--dry-run"])
    assert r.exit_code == 2
    assert "pipeline.toml:" in r.output and "stages.pair.inputs" in r.output and "not in all of them" in r.output


def test_bakery_version_is_in_every_key(project):
    spec = plan(load_pipeline(project / "pipeline.toml"))[0]
    assert spec.parts["bakery_version"] == bakery.__version__ and spec.parts["code"]
