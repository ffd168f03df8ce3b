"""Issue 9: nothing bakery did not write is replaced or deleted; every fault is one line.

CLI behaviour is tested through real ``python -m bakery`` subprocesses (exit codes,
stderr, files on disk), library behaviour in process.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from pipeline_helpers import BASIC_TOML, SLEEP_TOML, bake_until_started, make_project, tree_snapshot, write_image

from bakery.errors import UsageError
from bakery.formats.errors import BundleError
from bakery.formats.images import load_image
from bakery.formats.reader import read_bundle
from bakery.pipeline.config import ConfigError, load_pipeline, role_files
from bakery.pipeline.safety import check_bundle_target

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    return env


def bakery(cwd: Path, *args: str, limit_bytes: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))  # a disk that fills up

    return subprocess.run([sys.executable, "-m", "bakery", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit if limit_bytes else None)


def one_error_line(err: str) -> str:
    """The single error line of stderr; fails on a traceback or several error lines."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def report(root: Path) -> dict:
    return json.loads((root / "out" / "bake-report.json").read_text())


def statuses(root: Path) -> dict:
    return {f"{t['stage']}/{t['asset']}": t["status"] for t in report(root)["tasks"]}


@pytest.fixture
def project(tmp_path):
    make_project(tmp_path, images=("a", "b"))
    return tmp_path


# -- bakery run -o DIR ----------------------------------------------------------------
@pytest.mark.parametrize("target", [".", "src"])
def test_run_refuses_to_replace_a_folder_that_is_not_a_bundle(project, target):
    before = tree_snapshot(project)
    r = bakery(project, "run", "neural_texture", "src/a.png", "-o", target)
    assert r.returncode == 2
    line = one_error_line(r.stderr)
    assert "is not a bakery bundle" in line and "-o" in line
    assert tree_snapshot(project) == before


def test_bundle_target_accepts_new_empty_or_bundle_folders(tmp_path):
    check_bundle_target(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_bundle_target(tmp_path / "empty")
    b = tmp_path / "b"
    b.mkdir()
    (b / "manifest.json").write_text('{"schema_version": 1, "bakery_version": "0", "files": []}')
    (b / "x.meta").write_text("unity")
    check_bundle_target(b)
    (b / "manifest.json").write_text('{"name": "someone else\'s manifest"}')
    with pytest.raises(UsageError, match="not a bakery bundle"):
        check_bundle_target(b)


# -- [project] out / cache ------------------------------------------------------------
OVERLAPS = [
    ({"out": "src"}, "project.out: holds the source asset src/a.png"),
    ({"cache": "src"}, "project.cache: holds the source asset src/a.png"),
    ({"out": "shared", "cache": "shared"}, "project.cache: is the same folder as project.out"),
    ({"out": "out", "cache": "out/cache"}, "project.cache: lies inside project.out"),
    ({"out": "cache/out", "cache": "cache"}, "project.out: lies inside project.cache"),
]


@pytest.mark.parametrize("paths,message", OVERLAPS)
def test_overlapping_out_or_cache_is_refused_by_bake_and_clean(project, paths, message):
    toml = BASIC_TOML.replace('out = "out"', f'out = "{paths.get("out", "out")}"')
    toml = toml.replace('cache = "cache"', f'cache = "{paths.get("cache", "cache")}"')
    (project / "pipeline.toml").write_text(toml)
    before = tree_snapshot(project)
    for cmd in ("bake", "clean"):
        r = bakery(project, cmd, "pipeline.toml")
        assert r.returncode == 2, (cmd, r.stderr)
        assert message in one_error_line(r.stderr), r.stderr
        assert tree_snapshot(project) == before  # the sources survive `clean`


def test_out_inside_a_material_folder_is_refused(tmp_path):
    write_image(tmp_path / "mats/bricks/albedo.png")
    (tmp_path / "pipeline.toml").write_text(
        '[project]\nout = "mats/bricks/baked"\nplugins = ["pipeline_helpers"]\n'
        '[assets.bricks]\nmaterial = "mats/bricks"\n'
        '[stages.m]\ntype = "test_material"\ninputs = ["bricks"]\n')
    with pytest.raises(ConfigError, match="project.out: lies inside the source asset folder bricks"):
        load_pipeline(tmp_path / "pipeline.toml")


def test_clean_removes_only_what_bakery_wrote(project):
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    (project / "out/README.txt").write_text("the art team's notes")
    (project / "out/blur.meta").write_text("unity")
    (project / "out/view-snapshot.json").write_text('{"snapshot": "../shots"}')   # `bakery view --snapshot`'s record
    (project / "cache/notes.txt").write_text("mine")
    r = bakery(project, "clean", "pipeline.toml")
    assert r.returncode == 0, r.stderr
    assert "kept 2 file(s)" in r.stderr and "kept 1 file(s)" in r.stderr
    left = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
    assert left == ["cache/notes.txt", "out/.bakery.lock", "out/README.txt", "out/blur.meta",
                    "pipeline.toml", "src/a.png", "src/b.png"]


def test_a_persons_files_among_the_logs_survive_bakes_and_clean(project):
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    logs = project / "out" / "logs"
    ours = sorted(logs.rglob("*.log"))
    assert len(ours) == 4 and all(p.read_text().startswith(f"# bakery task log: {p.relative_to(logs).with_suffix('')}")
                                  for p in ours)
    notes = logs / "blur" / "notes.log"
    notes.write_text("what the on-call engineer saw")
    taken = ours[0]
    taken.write_text("a person's file where a task's log goes")
    r = bakery(project, "bake", "pipeline.toml", "--force")
    assert r.returncode == 1 and "was not written by bakery; refusing to replace it" in r.stderr, r.stderr
    assert str(taken.relative_to(project)) in r.stderr or str(taken) in r.stderr
    assert taken.read_text() == "a person's file where a task's log goes"
    r = bakery(project, "clean", "pipeline.toml")
    assert r.returncode == 0, r.stderr
    assert sorted(p.relative_to(logs).as_posix() for p in logs.rglob("*") if p.is_file()) == \
        ["blur/notes.log", taken.relative_to(logs).as_posix()]
    assert notes.read_text() == "what the on-call engineer saw"


def test_logs_an_earlier_bakery_wrote_are_recognised_by_shape(tmp_path):
    from bakery.pipeline.task_log import is_task_log, open_task_log

    old = tmp_path / "logs" / "blur" / "photos" / "a.log"
    old.parent.mkdir(parents=True)
    old.write_text("2026-11-02 10:01:02,345 INFO blur/photos/a: built\n")
    empty, person = old.with_name("b.log"), old.with_name("c.log")
    empty.write_text("")
    person.write_text("INFO: my own notes\n")
    assert is_task_log(old) and is_task_log(empty) and not is_task_log(person)
    path, f = open_task_log(tmp_path / "logs", "blur", "photos/a", "blur/photos/a")   # replaces an old log
    with f:
        f.write("new\n")
    assert path == old and old.read_text() == "# bakery task log: blur/photos/a\nnew\n"
    with pytest.raises(OSError, match="not written by bakery"):
        open_task_log(tmp_path / "logs", "blur", "photos/c", "blur/photos/c")
    assert person.read_text() == "INFO: my own notes\n"


# -- files an engine adds inside a bundle -------------------------------------------------
def test_engine_files_inside_bundles_survive_rebakes_and_keep_the_bundle_clean(project):
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    bundle = project / "out/blur/photos/a"
    meta = {"blurred.png.meta": "guid: 1", "manifest.json.meta": "guid: 2"}
    for name, text in meta.items():
        (bundle / name).write_text(text)
    (project / "out/blur/photos/a.meta").write_text("folder guid")
    r = bakery(project, "bake", "pipeline.toml")
    assert r.returncode == 0 and set(statuses(project).values()) == {"cached"}
    assert "restored" not in r.stdout + r.stderr  # not dirty
    # new params: every bundle is rebuilt and republished; the engine files carry over
    (project / "pipeline.toml").write_text(BASIC_TOML.replace("radius = 1", "radius = 2"))
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    assert statuses(project)["blur/photos/a"] == "built"
    assert {n: (bundle / n).read_text() for n in meta} == meta
    assert (project / "out/blur/photos/a.meta").read_text() == "folder guid"
    r = bakery(project, "verify", "out")
    assert r.returncode == 0 and "4 ok, 0 bad" in r.stdout, r.stdout + r.stderr


def test_run_republish_keeps_engine_files(tmp_path):
    import logging

    import pipeline_helpers  # noqa: F401  (registers test_blur)
    from bakery.pipeline.task import run_task, settings_for
    from bakery.stages import StageInput, get_stage

    src = write_image(tmp_path / "a.png")
    out = tmp_path / "bundle"

    def run(radius):
        stage, inputs = get_stage("test_blur"), [StageInput("a", {"image": src})]
        run_task(stage, inputs, settings_for(stage, {"radius": radius}, inputs, device_class=None), seed=0,
                 device_provider=None, out_dir=out, log=logging.getLogger("t"))

    run(1)
    (out / "blurred.png.meta").write_text("guid")
    first = (out / "blurred.png").read_bytes()
    run(3)
    assert (out / "blurred.png").read_bytes() != first
    assert (out / "blurred.png.meta").read_text() == "guid"
    read_bundle(out)


# -- cache metadata with the wrong shape ----------------------------------------------------
@pytest.mark.parametrize("damage", ["sums", "parts", "inputs"])
def test_malformed_cache_metadata_is_a_corrupt_entry_rebuilt(project, damage):
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    entries = sorted((project / "cache/entries").iterdir())
    records = sorted((project / "cache/records/blur/photos").glob("*.json"))
    if damage == "sums":
        for e in entries:
            (e / "sums.json").write_text("[1, 2, 3]")
    else:
        for rec in records:
            doc = json.loads(rec.read_text())
            if damage == "parts":
                doc["parts"] = 5
            else:
                doc["parts"]["inputs"] = [1, 2]
            rec.write_text(json.dumps(doc))
        for e in entries:
            (e / "sums.json").unlink()  # the entry is gone too: the record must explain the rebuild
    r = bakery(project, "bake", "pipeline.toml")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert set(statuses(project).values()) == {"built"}
    if damage == "sums":
        reasons = {t["reason"] for t in report(project)["tasks"]}
        assert any("corrupted cache entry (sums.json is malformed), rebuilt" in x for x in reasons), reasons
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    assert set(statuses(project).values()) == {"cached"}


# -- filesystem faults outside a task ----------------------------------------------------------
def test_unwritable_out_is_one_line_exit_1(project):
    (project / "blocker").write_text("a file where a folder should be")
    (project / "pipeline.toml").write_text(BASIC_TOML.replace('out = "out"', 'out = "blocker/out"'))
    r = bakery(project, "bake", "pipeline.toml")
    assert r.returncode == 1
    line = one_error_line(r.stderr)
    assert "blocker" in line and "Not a directory" in line


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_read_only_or_full_out_is_one_line_exit_1(project, monkeypatch, err):
    """As root (CI containers) a read-only folder cannot be made; the fault is injected."""
    from click.testing import CliRunner

    from bakery.pipeline.cli import bake_cmd
    from bakery.pipeline.lock import OutputLock

    def refuse(self):
        raise OSError(err, os.strerror(err), str(self.path))

    monkeypatch.chdir(project)
    monkeypatch.setattr(OutputLock, "__enter__", refuse)
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml"])
    assert r.exit_code == 1, r.output
    line = one_error_line(r.output)
    assert line.startswith("error: out/.bakery.lock: file system error:") and os.strerror(err) in line


def test_unwritable_report_path_is_one_line_exit_1(project):
    (project / "blocker").write_text("x")
    r = bakery(project, "bake", "pipeline.toml", "--report", "blocker/report.json")
    assert r.returncode == 1
    assert "blocker/report.json" in one_error_line(r.stderr)


def test_report_never_overwrites_another_file(project):
    (project / "notes.json").write_text('{"mine": true}')
    r = bakery(project, "bake", "pipeline.toml", "--report", "notes.json")
    assert r.returncode == 2
    assert "notes.json: --report: exists and is not a bake report" in one_error_line(r.stderr)
    assert (project / "notes.json").read_text() == '{"mine": true}'
    r = bakery(project, "bake", "pipeline.toml", "--report", "r.json")
    assert r.returncode == 0 and json.loads((project / "r.json").read_text())["totals"]["built"] == 4
    assert bakery(project, "bake", "pipeline.toml", "--report", "r.json").returncode == 0  # its own: fine


def test_full_disk_is_one_line_and_no_report_claims_a_build(project):
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    assert report(project)["totals"]["built"] == 4
    before = tree_snapshot(project / "out" / "blur")
    (project / "pipeline.toml").write_text(BASIC_TOML.replace("radius = 1", "radius = 2"))
    r = bakery(project, "bake", "pipeline.toml", limit_bytes=300)  # every file above 300 bytes fails
    assert r.returncode == 1
    assert "disk full" in one_error_line(r.stderr)
    assert not (project / "out/bake-report.json").exists()  # the old report no longer claims anything
    assert tree_snapshot(project / "out" / "blur") == before  # previous bundles untouched
    assert not list(project.rglob(".*staging*"))
    r = bakery(project, "bake", "pipeline.toml")  # space again: the bake completes
    assert r.returncode == 0 and report(project)["totals"]["built"] == 4


# -- parameters, images, globs ------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_params_are_rejected_at_validation(project, value):
    (project / "pipeline.toml").write_text(BASIC_TOML.replace("radius = 1", f"radius = 1, gain = {value}"))
    r = bakery(project, "bake", "pipeline.toml")
    assert r.returncode == 2
    line = one_error_line(r.stderr)
    assert "stages.blur.params.gain" in line and "not a finite number" in line
    assert not (project / "out").exists()


def test_non_finite_param_on_the_command_line(project):
    r = bakery(project, "run", "neural_texture", "src/a.png", "-o", "new", "--param", "lr=nan")
    assert r.returncode == 2
    assert "--param.lr" in one_error_line(r.stderr) and not (project / "new").exists()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(width: int, height: int, depth: int, color_type: int, rows: bytes) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(rows))
            + _png_chunk(b"IEND", b""))


def test_decompression_bomb_names_the_file(project):
    bomb = project / "src" / "bomb.png"
    bomb.write_bytes(png_bytes(100000, 100000, 8, 2, b"\0" * 64))
    with pytest.raises(UsageError, match=r"bomb\.png: .*(100000x100000|decompression bomb)"):
        load_image(bomb)
    r = bakery(project, "bake", "pipeline.toml")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    failed = [t for t in report(project)["tasks"] if t["status"] == "failed"]
    assert [t["asset"] for t in failed] == ["photos/bomb"] and "src/bomb.png" in failed[0]["error"]


def _filter_rows(a: np.ndarray) -> bytes:
    """PNG rows of big-endian 16-bit samples, each row with another filter (0-4)."""
    h, w, c = a.shape
    bpp = 2 * c
    raw = [np.frombuffer(a[y].astype(">u2").tobytes(), np.uint8).astype(np.int32) for y in range(h)]
    out = b""
    for y, row in enumerate(raw):
        ftype = y % 5
        prior = raw[y - 1] if y else np.zeros_like(row)
        left = np.concatenate([np.zeros(bpp, np.int32), row[:-bpp]])
        up_left = np.concatenate([np.zeros(bpp, np.int32), prior[:-bpp]])
        if ftype == 0:
            pred = np.zeros_like(row)
        elif ftype == 1:
            pred = left
        elif ftype == 2:
            pred = prior
        elif ftype == 3:
            pred = (left + prior) // 2
        else:
            p = left + prior - up_left
            pa, pb, pc = abs(p - left), abs(p - prior), abs(p - up_left)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prior, up_left))
        out += bytes([ftype]) + ((row - pred) % 256).astype(np.uint8).tobytes()
    return out


@pytest.mark.parametrize("channels,color_type", [(3, 2), (4, 6)])
def test_16_bit_pngs_keep_their_precision(tmp_path, channels, color_type):
    a = np.random.default_rng(channels).integers(0, 65536, (9, 11, channels)).astype(np.uint16)
    path = tmp_path / "deep.png"
    path.write_bytes(png_bytes(11, 9, 16, color_type, _filter_rows(a)))
    got = load_image(path)
    assert got.shape == a.shape and got.dtype == np.float32
    np.testing.assert_array_equal(np.round(got * 65535.0).astype(np.uint16), a)


def test_globs_never_match_the_pipelines_own_folders(tmp_path):
    for name in ("bricks", "wood"):
        write_image(tmp_path / name / "albedo.png")
    (tmp_path / "pipeline.toml").write_text(
        '[project]\nout = "out"\ncache = "cache"\nplugins = ["pipeline_helpers"]\n'
        '[assets.mats]\nmaterial = "*"\n'
        '[stages.m]\ntype = "test_material"\ninputs = ["mats"]\n')
    assert bakery(tmp_path, "bake", "pipeline.toml").returncode == 0
    write_image(tmp_path / "out" / "albedo.png")  # as if a stage or a person left one there
    write_image(tmp_path / "cache" / "albedo.png")
    pipe = load_pipeline(tmp_path / "pipeline.toml")
    assert [a.name for a in pipe.assets["mats"]] == ["mats/bricks", "mats/wood"]
    r = bakery(tmp_path, "bake", "pipeline.toml")
    assert r.returncode == 0 and set(statuses(tmp_path).values()) == {"cached"}, r.stderr


# -- signals and verify ----------------------------------------------------------------------------


def test_sigterm_is_treated_like_ctrl_c_and_exits_143(tmp_path):
    make_project(tmp_path, SLEEP_TOML.format(seconds=30.0, tag="x"), images=("a", "b"))
    started = tmp_path / "started"
    p = bake_until_started(tmp_path, {**_env(), "BAKERY_TEST_STARTED": str(started)})
    assert list(tmp_path.rglob(".*staging*"))  # mid-task: a staging folder exists
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 143 and "interrupted" in err and "Traceback" not in err
    assert [t["reason"] for t in report(tmp_path)["tasks"]] == ["interrupted", "interrupted"]
    assert not list(tmp_path.rglob(".*staging*"))


def test_verify_exits_1_on_a_corrupt_bundle_and_speaks_json(project):
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    r = bakery(project, "verify", "out", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] == 4
    (project / "out/blur/photos/a/blurred.png").write_bytes(b"not a png")
    r = bakery(project, "verify", "out")
    assert r.returncode == 1 and "1 bad" in r.stdout
    assert "1 bad bundle(s)" in one_error_line(r.stderr)
    r = bakery(project, "verify", "out", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and (doc["ok"], doc["bad"]) == (3, 1)
    bad = [b for b in doc["bundles"] if not b["ok"]]
    assert bad[0]["path"].endswith("blur/photos/a") and "size mismatch" in bad[0]["error"]
    assert bakery(project, "verify", "nowhere").returncode == 2  # usage error stays 2


# -- rough edges -------------------------------------------------------------------------------------
def test_utf8_bom_is_accepted(project):
    text = (project / "pipeline.toml").read_text()
    (project / "pipeline.toml").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_pipeline(project / "pipeline.toml").stages["blur"].params["radius"] == 1
    (project / "pipeline.toml").write_bytes(b"\xef\xbb\xbf" + text.replace("radius = 1", "radius = -1").encode())
    with pytest.raises(ConfigError, match=r"pipeline.toml:14: stages.blur.params.radius"):
        load_pipeline(project / "pipeline.toml")


def test_role_files_match_case_insensitively_and_refuse_two_files_for_one_role(tmp_path):
    write_image(tmp_path / "m" / "Albedo.PNG")
    write_image(tmp_path / "m" / "NORMAL.png")
    (tmp_path / "m" / "notes.txt").write_text("x")
    assert sorted(role_files(tmp_path / "m", ("albedo", "normal"))) == ["albedo", "normal"]
    write_image(tmp_path / "m" / "albedo.jpg")
    with pytest.raises(UsageError, match="two files for role 'albedo'.*Albedo.PNG and albedo.jpg"):
        role_files(tmp_path / "m", ("albedo", "normal"))


def test_run_matches_roles_like_bake_and_names_both_duplicates(tmp_path):
    write_image(tmp_path / "mat" / "Albedo.png")
    write_image(tmp_path / "mat" / "albedo.jpg")
    r = bakery(tmp_path, "run", "ntc", "mat", "-o", "baked")
    assert r.returncode == 2
    line = one_error_line(r.stderr)
    assert "Albedo.png" in line and "albedo.jpg" in line and not (tmp_path / "baked").exists()


def test_material_with_two_files_for_one_role_is_a_config_error(tmp_path):
    write_image(tmp_path / "mats/bricks/albedo.png")
    write_image(tmp_path / "mats/bricks/ALBEDO.tga")
    (tmp_path / "pipeline.toml").write_text(
        '[project]\nplugins = ["pipeline_helpers"]\n[assets.bricks]\nmaterial = "mats/bricks"\n'
        '[stages.m]\ntype = "test_material"\ninputs = ["bricks"]\n')
    with pytest.raises(ConfigError, match="assets.bricks.material: two files for role 'albedo'"):
        load_pipeline(tmp_path / "pipeline.toml")


def test_asset_glob_matching_nothing_exits_2_and_keeps_the_last_report(project):
    assert bakery(project, "bake", "pipeline.toml").returncode == 0
    before = (project / "out/bake-report.json").read_bytes()
    r = bakery(project, "bake", "pipeline.toml", "--asset", "photo/*")
    assert r.returncode == 2
    assert "--asset: 'photo/*' matches no asset" in one_error_line(r.stderr)
    assert (project / "out/bake-report.json").read_bytes() == before


# -- the reader checks every documented per-layer field ---------------------------------------------
def _network_bundle(folder: Path) -> Path:
    from bakery.formats.bundle import BundleWriter
    from bakery.nn.encodings import FrequencyEncoding
    from bakery.nn.network import NetworkSpec

    spec = NetworkSpec(FrequencyEncoding(2, 2), (8,), 3, hidden_activation="tanh")
    w = BundleWriter(folder)
    w.write_weights("weights.bin", spec, spec.init_params(0))
    w.finalize({"stage": {"type": "fit", "version": "1"}, "params": {}, "seed": 0, "device": None, "metrics": {}})
    return folder


@pytest.mark.parametrize("field,value", [("in", None), ("in", 7), ("in", 8.0), ("out", None), ("activation", None),
                                         ("activation", "relu"), ("weight_offset", None), ("bias_offset", None)])
def test_reader_checks_every_per_layer_field(tmp_path, field, value):
    folder = _network_bundle(tmp_path / "b")
    read_bundle(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    layer = manifest["networks"]["decoder"]["layers"][0]
    if value is None:
        del layer[field]
    else:
        layer[field] = value
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError) as e:
        read_bundle(folder)
    assert str(e.value).startswith(str(folder))  # one line naming the manifest or the weights file


@pytest.mark.parametrize("field,value", [("layout", "column_major"), ("matrix_align", 32), ("param_count", 5)])
def test_reader_checks_network_layout_fields(tmp_path, field, value):
    folder = _network_bundle(tmp_path / "b")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["networks"]["decoder"][field] = value
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=f"networks.decoder '{field}'"):
        read_bundle(folder)
