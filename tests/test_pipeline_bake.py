"""Executor and cache behaviour, driven through the `bake` / `clean` commands."""

import json

import pytest
from click.testing import CliRunner

import pipeline_helpers as H
from pipeline_helpers import BASIC_TOML, make_project, tree_snapshot, write_image

from bakery.pipeline.cli import bake_cmd, clean_cmd


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path)
    return tmp_path


def bake(*args, code=0):
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", *args])
    assert r.exit_code == code, r.output
    return r


def report(root):
    return json.loads((root / "out" / "bake-report.json").read_text())


def statuses(root):
    """What this bake did to each of its tasks (the report also lists the others out/ holds)."""
    return {f"{t['stage']}/{t['asset']}": t["status"] for t in report(root)["tasks"] if t["in_this_bake"]}


def test_first_bake_builds_second_is_all_cached(project):
    r = bake()
    assert "6 tasks: 6 built, 0 cached, 0 failed, 0 skipped" in r.output
    assert (project / "out/blur/photos/a/blurred.png").is_file()
    assert (project / "out/summary/photos/c/summary.json").is_file()
    runs = dict(H.RUNS)
    out_before = tree_snapshot(project / "out" / "blur")
    r = bake()
    assert "6 tasks: 0 built, 6 cached, 0 failed, 0 skipped" in r.output
    assert H.RUNS == runs  # no stage ran
    assert set(statuses(project).values()) == {"cached"}
    assert tree_snapshot(project / "out" / "blur") == out_before


def test_report_lists_outputs_with_checksums(project):
    bake("--report", "extra/r.json")
    rep = report(project)
    assert rep["totals"] == {"built": 6, "cached": 0, "failed": 0, "skipped": 0, "total": 6}
    t = next(t for t in rep["tasks"] if t["stage"] == "blur" and t["asset"] == "photos/a")
    files = {o["path"]: o for o in t["outputs"]}
    png = project / "out/blur/photos/a/blurred.png"
    assert files["out/blur/photos/a/blurred.png"]["sha256"] == H.sha256_hex(png)
    assert t["seconds"] >= 0 and "mean" in t["metrics"] and t["error"] is None
    assert json.loads((project / "extra/r.json").read_text())["tasks"] == rep["tasks"]
    manifest = json.loads((project / "out/blur/photos/a/manifest.json").read_text())
    assert manifest["seed"] == 7 and manifest["params"]["radius"] == 1


def test_changing_one_input_rebuilds_exactly_its_dependants(project):
    bake()
    write_image(project / "src" / "b.png", seed=99)
    bake()
    assert statuses(project) == {
        "blur/photos/a": "cached", "blur/photos/b": "built", "blur/photos/c": "cached",
        "summary/photos/a": "cached", "summary/photos/b": "built", "summary/photos/c": "cached"}
    reasons = {f"{t['stage']}/{t['asset']}": t["reason"] for t in report(project)["tasks"]}
    assert reasons["blur/photos/b"] == "input changed (image)"
    assert reasons["summary/photos/b"] == "input changed (image, upstream output)"


def test_failing_stage_fails_its_task_others_build_exit_1(project):
    toml = BASIC_TOML + '\n[stages.broken]\ntype = "test_fail"\ninputs = ["photos"]\n\n' \
                        '[stages.after]\ntype = "test_summary"\ninputs = ["stage:broken"]\n'
    (project / "pipeline.toml").write_text(toml)
    r = bake(code=1)
    st = statuses(project)
    assert st["broken/photos/a"] == "failed" and st["after/photos/a"] == "skipped"
    assert st["blur/photos/a"] == st["summary/photos/c"] == "built"
    t = next(t for t in report(project)["tasks"] if t["stage"] == "broken" and t["asset"] == "photos/b")
    assert t["error"] == "broken/photos/b: RuntimeError: boom on photos/b"
    assert "upstream broken/photos/a failed" in r.output
    assert not (project / "out/broken").exists()  # nothing half-written
    log = (project / "out/logs/broken/photos/a.log").read_text()
    assert "boom on photos/a" in log


def test_fail_fast_stops_after_first_failure(project):
    toml = BASIC_TOML.replace('type = "test_blur"', 'type = "test_fail"').replace("params = { radius = 1 }", "")
    (project / "pipeline.toml").write_text(toml)
    bake("--fail-fast", code=1)
    st = statuses(project)
    assert st["blur/photos/a"] == "failed"
    assert st["blur/photos/b"] == st["blur/photos/c"] == "skipped"
    assert [t["reason"] for t in report(project)["tasks"]][1] == "not run: --fail-fast after a failure"


def test_corrupted_cache_entry_is_detected_and_rebuilt(project):
    bake()
    key = next(t["key"] for t in report(project)["tasks"] if t["stage"] == "blur" and t["asset"] == "photos/a")
    entry_png = project / "cache/entries" / key / "bundle/blurred.png"
    good = entry_png.read_bytes()
    entry_png.write_bytes(good[:-10] + b"0123456789")
    r = bake()
    assert "corrupted cache entry (blurred.png checksum mismatch), rebuilt" in r.output
    assert statuses(project)["blur/photos/a"] == "built"
    assert statuses(project)["summary/photos/a"] == "cached"  # same bytes rebuilt: key unchanged
    assert entry_png.read_bytes() == good


def test_edited_output_folder_is_restored_from_cache(project):
    bake()
    (project / "out/blur/photos/a/blurred.png").write_bytes(b"oops")
    n = dict(H.RUNS)
    bake()
    assert H.RUNS == n and statuses(project)["blur/photos/a"] == "cached"
    assert (project / "out/blur/photos/a/blurred.png").read_bytes()[:4] == b"\x89PNG"


def test_dry_run_changes_nothing_and_says_why(project):
    r = bake("--dry-run", code=3)
    assert not (project / "out").exists() and not (project / "cache").exists()
    assert "6 tasks: 6 would build" in r.output and "new" in r.output
    bake()
    toml = (BASIC_TOML.replace("radius = 1", "radius = 2"))
    (project / "pipeline.toml").write_text(toml)
    write_image(project / "src" / "c.png", seed=5)
    H.BlurStage.version = "2"
    try:
        before = tree_snapshot(project)
        r = bake("--dry-run", code=3)
        assert tree_snapshot(project) == before
    finally:
        H.BlurStage.version = "1"
    lines = {line.split()[0] + "/" + line.split()[1]: line for line in r.output.splitlines()
             if line.startswith(("blur ", "summary "))}
    assert "input changed (image)" in lines["blur/photos/c"]
    assert "params changed (radius)" in lines["blur/photos/a"]
    assert "version changed (stage version 1 -> 2)" in lines["blur/photos/a"]
    assert "would-build" in lines["summary/photos/a"]


def test_force_all_or_one_stage(project):
    bake()
    bake("--force")
    assert set(statuses(project).values()) == {"built"}
    bake("--force", "summary")
    st = statuses(project)
    assert st["blur/photos/a"] == "cached" and st["summary/photos/a"] == "built"
    r = bake("--force", "nosuch", code=2)
    assert "--force: unknown stage 'nosuch'" in r.output


def test_only_stage_and_asset_glob(project):
    bake("--only", "blur")
    assert set(statuses(project)) == {"blur/photos/a", "blur/photos/b", "blur/photos/c"}
    bake("--only", "summary", "--asset", "photos/b")
    # summary needs blur's output: the upstream task comes along (cached)
    assert statuses(project) == {"blur/photos/b": "cached", "summary/photos/b": "built"}
    assert not (project / "out/summary/photos/a").exists()


def test_changed_files_bake_only_what_they_feed(project):
    bake()
    write_image(project / "src" / "a.png", seed=42)
    r = bake("--changed", "src/a.png", "--changed", "README.md")
    assert statuses(project) == {"blur/photos/a": "built", "summary/photos/a": "built"}
    assert "--changed: 1 file(s) feed no task: README.md" in r.output
    bake("--changed", "pipeline.toml")
    assert len(statuses(project)) == 6


def test_clean_removes_outputs_and_cache(project):
    bake()
    r = CliRunner().invoke(clean_cmd, ["pipeline.toml", "--keep-cache"])
    assert r.exit_code == 0 and (project / "cache").exists()
    assert [p.name for p in (project / "out").iterdir()] == [".bakery.lock"]
    n = dict(H.RUNS)
    bake()  # outputs come back from the cache without running a stage
    assert H.RUNS == n and (project / "out/blur/photos/a/blurred.png").is_file()
    r = CliRunner().invoke(clean_cmd, ["pipeline.toml"])
    assert r.exit_code == 0 and not (project / "cache").exists()
    assert [p.name for p in (project / "out").iterdir()] == [".bakery.lock"]
    assert (project / "src/a.png").is_file()


def test_device_is_not_opened_for_cpu_stages(project, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("device opened")

    monkeypatch.setattr("bakery.device.open_device", boom)
    monkeypatch.setattr("bakery.device.probe_device_class", boom)
    bake()
    assert report(project)["device"] is None


def test_device_stage_opens_device_once(project, monkeypatch):
    class Info:
        def to_dict(self):
            return {"backend": "vulkan", "adapter": "fake", "cooperative_vector": False, "software": True}

    from bakery.device import Toolchain

    class Dev:
        info, device_class = Info(), "fake:portable"
        toolchain = Toolchain("0", "0", "vulkan", "fake", "1.0", False)

    calls = []
    monkeypatch.setattr("bakery.device.open_device", lambda kind, cache_dir=None: calls.append(kind) or Dev())
    monkeypatch.setattr("bakery.device.probe_device_class", lambda kind: "fake:portable")
    monkeypatch.setattr("bakery.device.probe_toolchain", lambda kind: Dev.toolchain)
    (project / "pipeline.toml").write_text(BASIC_TOML + '\n[stages.dev]\ntype = "test_device"\ninputs = ["photos"]\n')
    # in this process (the fake device is patched in here; "auto" pools a GPU class's tasks)
    bake("--device", "software", "--jobs", "1")
    assert calls == ["software"]
    assert report(project)["device"]["adapter"] == "fake"
    out = json.loads((project / "out/dev/photos/b/device.json").read_text())
    assert out == {"class": "fake:portable"}


def test_plain_progress_lines_without_a_terminal(project):
    r = bake()
    assert "bake: [1/3] blur/photos/a built in" in r.output
    assert "bake: [3/3] summary/photos/c built in" in r.output


def test_progress_bars_on_a_terminal():
    import io
    import logging

    from bakery.progress import StageProgress

    stream = io.StringIO()
    lines = []

    class Catch(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    log = logging.getLogger("test.progress")
    log.addHandler(Catch())
    log.setLevel(logging.INFO)
    p = StageProgress("texture", 2, log=log, stream=stream, bars=True)
    p.task_callback("rust")(50, 100, loss=0.25)
    p.finished("rust", "built", 1.0)
    p.finished("wood", "failed", 1.0, "RuntimeError: x")
    p.close()
    text = stream.getvalue()
    assert "texture" in text and "2/2" in text and "rust 50/100 loss=0.25" in text
    assert "wood: failed: RuntimeError: x" in text
    assert lines == []  # bars replace the plain lines


def test_material_assets_reach_multi_role_stages(project):
    for mat in ("bricks", "stones"):
        for i, role in enumerate(("albedo", "normal", "roughness", "ao", "mask")):
            write_image(project / "mats" / mat / f"{role}.png", seed=i)
    (project / "pipeline.toml").write_text(
        BASIC_TOML + '\n[assets.mats]\nmaterial = "mats/*"\n\n[stages.mat]\ntype = "test_material"\ninputs = ["mats"]\n')
    bake("--only", "mat")
    assert statuses(project) == {"mat/mats/bricks": "built", "mat/mats/stones": "built"}
    means = json.loads((project / "out/mat/mats/stones/means.json").read_text())
    assert sorted(means) == ["albedo", "ao", "normal", "roughness"]  # mask.png is not a role it reads
    write_image(project / "mats" / "stones" / "mask.png", seed=78)
    bake("--only", "mat")
    assert statuses(project) == {"mat/mats/bricks": "cached", "mat/mats/stones": "cached"}
    write_image(project / "mats" / "stones" / "ao.png", seed=77)
    bake("--only", "mat")
    assert statuses(project) == {"mat/mats/bricks": "cached", "mat/mats/stones": "built"}
