"""Issue 45: readers that trust nothing, outputs that replace nothing, bakes that always stop.

One test (or a few) per class of fault. Each asserts the file system afterwards, by a full
listing of the test's folder (files by sha256, links by target, folders, special files)
before and after, not only the exit code.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ntc_bundles import edit_manifest, write_ntc_bundle
from pipeline_helpers import BASIC_TOML, make_project

from bakery.formats.errors import BundleError
from bakery.formats.reader import read_bundle
from tests.test_safety import _env   # bake subprocesses import this checkout and the test stages

TINY_NEURAL_TEXTURE = ("--param", "steps=4", "--param", "batch=256", "--param", "width=8", "--param", "layers=1")


def bakery_process(cwd: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m bakery ARGS`` in a process of its own (signals, hangs, limits)."""
    return subprocess.run([sys.executable, "-m", "bakery", *map(str, args)], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def bakery(cwd: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """The same command in this process (no interpreter start: the tests stay cheap); an
    exception other than the command's exit fails the test, as a traceback would."""
    from click.testing import CliRunner

    from bakery.cli import main

    old = os.getcwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


def listing(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every entry below ``root`` (links not followed): file -> sha256, link -> target,
    folder -> 'dir', anything else -> its kind. Top-level names in ``skip`` are left out."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0] in skip:
            continue
        mode = os.lstat(p).st_mode
        if stat.S_ISLNK(mode):
            out[rel] = "link -> " + os.readlink(p)
        elif stat.S_ISDIR(mode):
            out[rel] = "dir"
        elif stat.S_ISREG(mode):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = f"special {stat.S_IFMT(mode):o}"
    return out


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


# -- 1. names taken from a manifest ---------------------------------------------------------
def _set_role(name):
    def edit(m):
        ch = m["ntc"]["material"]["channels"]
        ch[name] = ch.pop("roughness")
    return edit


NAME_ATTACKS = {
    "role_dotdot": (_set_role("../../escaped"), "material role"),
    "role_slash": (_set_role("albedo/../../../x"), "material role"),
    "role_unknown": (_set_role("diffuse"), "material role"),
    "latents_outside": (lambda m: m["ntc"]["files"].__setitem__("latents", "../outside.bin"), "files.latents"),
    "latents_absolute": (lambda m: m["ntc"]["files"].__setitem__("latents", "/etc/passwd"), "files.latents"),
    "latents_unlisted": (lambda m: m["ntc"]["files"].__setitem__("latents", "latents.dds"), "files.latents"),
    "file_name_dotdot": (lambda m: m["files"][0].__setitem__("name", "../weights.bin"), "bad name"),
    "huge_width": (lambda m: m["ntc"]["latents"].__setitem__("width", 10 ** 9), "latents.width"),
    "channels_wrong_type": (lambda m: m["ntc"]["material"]["channels"].__setitem__("albedo", "0,3"), "albedo"),
    "ntc_not_object": (lambda m: m.__setitem__("ntc", ["x"]), "'ntc'"),
}


@pytest.mark.parametrize("attack", sorted(NAME_ATTACKS))
def test_manifest_names_are_checked_once_by_the_reader_and_verify_and_decompress_refuse(tmp_path, attack):
    edit, expect = NAME_ATTACKS[attack]
    bundle = write_ntc_bundle(tmp_path / "out" / "ntc" / "m")
    (tmp_path / "outside.bin").write_bytes(b"secret")
    edit_manifest(bundle, edit)
    before = listing(tmp_path)
    with pytest.raises(BundleError, match=expect):
        read_bundle(bundle)
    r = bakery(tmp_path, "verify", "out")
    assert r.returncode == 1 and "0 ok, 1 bad" in r.stdout, r.stdout + r.stderr
    r = bakery(tmp_path, "decompress", bundle, "-o", tmp_path / "decoded")
    assert r.returncode == 2 and "manifest.json" in one_error_line(r.stderr), r.stderr
    assert listing(tmp_path) == before  # nothing written anywhere, in or out of -o


def test_a_sound_bundle_still_decodes_in_both_latent_modes(tmp_path):
    for mode in ("packed", "bc"):
        bundle = write_ntc_bundle(tmp_path / mode, mode=mode)
        r = bakery(tmp_path, "decompress", bundle, "-o", tmp_path / f"{mode}_png")
        assert r.returncode == 0, r.stderr
        assert (tmp_path / f"{mode}_png" / "roughness_mip3.png").is_file()


# -- 2. decompress -o DIR ------------------------------------------------------------------
@pytest.fixture
def material_project(tmp_path):
    """A pipeline whose material folder ``mat`` holds the maps decompress would write."""
    (tmp_path / "mat").mkdir()
    for role in ("albedo", "normal", "roughness"):
        (tmp_path / "mat" / f"{role}.png").write_bytes(f"source {role}".encode())
    (tmp_path / "pipeline.toml").write_text('[project]\nout = "out"\n\n[assets.m]\nmaterial = "mat"\n\n'
                                            '[stages.ntc]\ntype = "ntc"\ninputs = ["m"]\n')
    write_ntc_bundle(tmp_path / "bundle", mips=False)
    return tmp_path


def test_decompress_refuses_a_folder_it_did_not_write(material_project):
    root = material_project
    before = listing(root)
    r = bakery(root, "decompress", "bundle", "-o", "mat")
    assert r.returncode == 2 and "mat" in one_error_line(r.stderr) and "--force" in r.stderr
    assert listing(root) == before


def test_decompress_force_never_replaces_a_pipelines_source_asset(material_project):
    root = material_project
    before = listing(root)
    r = bakery(root, "decompress", "bundle", "-o", "mat", "--force")
    assert r.returncode == 2 and "source asset" in one_error_line(r.stderr)
    assert listing(root) == before


def test_decompress_replaces_only_its_own_files_and_force_only_what_it_says(material_project):
    root = material_project
    assert bakery(root, "decompress", "bundle", "-o", "decoded").returncode == 0
    first = listing(root / "decoded")
    assert {"albedo.png", "normal.png", "roughness.png", ".bakery-decompress.json"} == set(first)
    (root / "decoded" / "notes.txt").write_text("mine")
    r = bakery(root, "decompress", "bundle", "-o", "decoded")  # its own folder: fine again
    assert r.returncode == 0, r.stderr
    assert listing(root / "decoded") == {**first, "notes.txt": listing(root / "decoded")["notes.txt"]}
    (root / "other").mkdir()
    (root / "other" / "albedo.png").write_text("a stray file, no pipeline's source")
    (root / "other" / "keep.txt").write_text("keep")
    before = listing(root, skip=("other",))
    assert bakery(root, "decompress", "bundle", "-o", "other").returncode == 2
    r = bakery(root, "decompress", "bundle", "-o", "other", "--force")
    assert r.returncode == 0, r.stderr
    assert (root / "other" / "keep.txt").read_text() == "keep"
    assert (root / "other" / "albedo.png").read_bytes() == (root / "decoded" / "albedo.png").read_bytes()
    assert listing(root, skip=("other",)) == before


def test_decompress_onto_a_link_is_refused(material_project):
    root = material_project
    (root / "elsewhere").mkdir()
    (root / "link").symlink_to(root / "elsewhere")
    before = listing(root)
    r = bakery(root, "decompress", "bundle", "-o", "link")
    assert r.returncode == 2 and "symbolic link" in one_error_line(r.stderr)
    assert listing(root) == before


# -- 3. out/ or cache/ pointing at an existing folder ----------------------------------------
def _user_folder(folder: Path) -> None:
    """What a person keeps in a folder before pointing out/ or the cache at it."""
    for sub in ("logs", "records", "report", "device", "entries"):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "mine.log").write_text(f"the team's {sub}")
    (folder / "report.html").write_text("<html>the team's report</html>")
    (folder / "bake-report.json").write_text('{"ours": true}')


@pytest.mark.parametrize("which", ["out", "cache"])
def test_a_bake_into_a_persons_folder_is_refused_and_clean_keeps_it(tmp_path, which):
    make_project(tmp_path, BASIC_TOML.replace(f'{which} = "{which}"', f'{which} = "work"'), images=("a",))
    _user_folder(tmp_path / "work")
    before = listing(tmp_path, skip=("out", "cache"))
    r = bakery(tmp_path, "bake", "pipeline.toml")
    assert r.returncode == 2 and "work" in one_error_line(r.stderr) and "not made by bakery" in r.stderr
    r = bakery(tmp_path, "clean", "pipeline.toml")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    after = listing(tmp_path, skip=("out", "cache"))
    assert {k: after.get(k) for k in before} == before  # every file, folder and byte of the person's
    assert set(after) - set(before) <= {"work/.bakery.lock"}  # the lock is bakery's own file


def test_bakes_never_replace_a_persons_report_files(tmp_path):
    make_project(tmp_path, images=("a",))
    for name, text in (("report.html", "<p>mine</p>"), ("bake-report.json", "[1, 2]")):
        (tmp_path / "out").mkdir(exist_ok=True)
        (tmp_path / "out" / name).write_text(text)
        before = listing(tmp_path)
        r = bakery(tmp_path, "bake", "pipeline.toml")
        assert r.returncode == 2 and name in one_error_line(r.stderr)
        after = listing(tmp_path)
        assert {k: after.get(k) for k in before} == before
        assert all(k.startswith("cache") or k in ("out/.bakery.lock", "out/logs", "out/.bakery-owned")
                   for k in set(after) - set(before)), after
        (tmp_path / "out" / name).unlink()


def test_clean_keeps_empty_folders_a_person_made(tmp_path):
    make_project(tmp_path, images=("a",))
    assert bakery(tmp_path, "bake", "pipeline.toml").returncode == 0
    for d in ("out/mine", "out/blur/mine", "cache/mine"):
        (tmp_path / d).mkdir()
    assert bakery(tmp_path, "clean", "pipeline.toml").returncode == 0
    assert listing(tmp_path, skip=("src",)) == {
        "cache": "dir", "cache/mine": "dir", "out": "dir", "out/.bakery.lock": listing(tmp_path)["out/.bakery.lock"],
        "out/blur": "dir", "out/blur/mine": "dir", "out/mine": "dir",
        "pipeline.toml": listing(tmp_path)["pipeline.toml"]}


# -- 4. links inside out/ --------------------------------------------------------------------
def _plant(root: Path, where: str) -> Path:
    target = root / "outside"
    (target / "sub").mkdir(parents=True, exist_ok=True)
    (target / "secret.txt").write_text("not bakery's")
    link = root / where
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(target / ("secret.txt" if where.endswith(".lock") else "sub"))
    return link


@pytest.mark.parametrize("where", ["out/.bakery.lock", "out/logs/blur", "out/blur", "out/blur/photos"])
def test_writes_never_follow_a_link_planted_in_out(tmp_path, where):
    make_project(tmp_path, images=("a",))
    assert bakery(tmp_path, "bake", "pipeline.toml").returncode == 0
    (tmp_path / "pipeline.toml").write_text(BASIC_TOML.replace("radius = 1", "radius = 2"))  # everything rebuilds
    _plant(tmp_path, where)
    before = listing(tmp_path, skip=("out", "cache"))
    r = bakery(tmp_path, "bake", "pipeline.toml")
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    assert "symbolic link" in r.stdout + r.stderr
    assert listing(tmp_path, skip=("out", "cache")) == before
    assert (tmp_path / where).is_symlink()
    r = bakery(tmp_path, "clean", "pipeline.toml")
    assert "Traceback" not in r.stderr
    assert listing(tmp_path, skip=("out", "cache")) == before


def test_run_onto_a_link_is_refused(tmp_path):
    make_project(tmp_path, images=("a",))
    (tmp_path / "outside").mkdir()
    (tmp_path / "bundle").symlink_to(tmp_path / "outside")
    before = listing(tmp_path)
    r = bakery(tmp_path, "run", "neural_texture", "src/a.png", "-o", "bundle", *TINY_NEURAL_TEXTURE)
    assert r.returncode == 2 and "symbolic link" in one_error_line(r.stderr)
    assert listing(tmp_path) == before


# -- 5. bakes that always stop ---------------------------------------------------------------
SPIN_SLANG = """\
float spin(float v)
{
    while (v >= 0.0)
    {
        v = v * 1.5 + 1.0;
    }
    return v;
}

[Differentiable]
float hang(no_diff float2 uv, float gain)
{
    float s = no_diff spin(uv.x);
    return gain * uv.x + min(s, 0.0);
}
"""

SPIN_TOML = """\
[project]
out = "out"
cache = "cache"
device = "auto"
{project}

[assets.spin]
fit = "spin.toml"

[stages.fit]
type = "fit"
inputs = ["spin"]
{stage}
"""


def _spin_project(root: Path, project: str = "", stage: str = "") -> None:
    from PIL import Image
    import numpy as np

    (root / "spin.slang").write_text(SPIN_SLANG)
    Image.fromarray(np.full((8, 8), 128, np.uint8)).save(root / "ref.png")
    (root / "spin.toml").write_text('shader = "spin.slang"\nfunction = "hang"\nreference = "ref.png"\nsize = [8, 8]\n'
                                    '[args]\nuv = { uv = true }\ngain = { param = [], init = 0.2, lr = 0.02 }\n'
                                    '[fit]\nsteps = 8\n')
    (root / "pipeline.toml").write_text(SPIN_TOML.format(project=project, stage=stage))


def test_dispatch_timeout_comes_from_the_stage_else_the_project(tmp_path):
    from bakery.pipeline.config import load_pipeline
    from bakery.pipeline.planner import PlanOptions, plan

    _spin_project(tmp_path, project="dispatch_timeout = 7.5")
    (spec,) = plan(load_pipeline(tmp_path / "pipeline.toml"), PlanOptions())
    assert spec.dispatch_timeout == 7.5
    _spin_project(tmp_path, project="dispatch_timeout = 7.5", stage="dispatch_timeout = 3")
    (spec,) = plan(load_pipeline(tmp_path / "pipeline.toml"), PlanOptions())
    assert spec.dispatch_timeout == 3.0 and "dispatch_timeout" not in json.dumps(spec.parts)  # not in the key
    _spin_project(tmp_path, stage="dispatch_timeout = -1")
    r = bakery(tmp_path, "bake", "pipeline.toml", "--dry-run")
    assert r.returncode == 2 and "stages.fit.dispatch_timeout" in one_error_line(r.stderr)


def test_a_shader_that_never_terminates_fails_its_task_at_the_time_limit(tmp_path):
    _spin_project(tmp_path, stage="dispatch_timeout = 2")
    before = listing(tmp_path, skip=("out", "cache"))
    t0 = time.monotonic()
    r = bakery_process(tmp_path, "bake", "pipeline.toml", timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60
    (task,) = json.loads((tmp_path / "out" / "bake-report.json").read_text())["tasks"]
    assert task["status"] == "failed" and "longer than 2 s" in task["error"], task
    assert listing(tmp_path, skip=("out", "cache")) == before
    assert not (tmp_path / "out" / "fit" / "spin").exists()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (an exited one not yet reaped, a zombie, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143)])  # SIGINT takes the same path (130)
@pytest.mark.parametrize("jobs", ["1", "2"], ids=["in-process", "worker-processes"])  # auto's two answers
def test_signals_stop_a_bake_stuck_in_a_dispatch_within_seconds(tmp_path, sig, code, jobs):
    _spin_project(tmp_path)
    before = listing(tmp_path, skip=("out", "cache"))
    p = subprocess.Popen([sys.executable, "-m", "bakery", "bake", "pipeline.toml", "--jobs", jobs], cwd=tmp_path,
                         env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not list((tmp_path / "cache").glob("entries/.*.staging-*")):
        assert p.poll() is None and time.monotonic() - t0 < 60, p.communicate()
        time.sleep(0.05)
    time.sleep(3.0)  # compiled and dispatched: the spin is running
    workers = _children(p.pid)
    p.send_signal(sig)
    t1 = time.monotonic()
    _, err = p.communicate(timeout=30)
    assert time.monotonic() - t1 < 12
    assert p.returncode == code and "interrupted" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 5.0   # workers (and the pool's resource tracker) end within seconds too
    while [pid for pid in workers if _running(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if _running(pid)], "a worker process outlived the bake"
    assert listing(tmp_path, skip=("out", "cache")) == before
    r = bakery_process(tmp_path, "bake", "pipeline.toml", "--dry-run")  # the next bake starts clean
    assert "Traceback" not in r.stderr


# -- 6. readers read only regular files of bounded size --------------------------------------
def _baked(tmp_path: Path) -> Path:
    make_project(tmp_path, images=("a",))
    assert bakery(tmp_path, "bake", "pipeline.toml").returncode == 0
    return tmp_path / "out" / "blur" / "photos" / "a"


def test_a_fifo_for_a_manifest_is_refused_not_waited_on(tmp_path):
    bundle = _baked(tmp_path)
    (bundle / "manifest.json").unlink()
    os.mkfifo(bundle / "manifest.json")
    before = listing(tmp_path)
    r = bakery_process(tmp_path, "inspect", bundle, timeout=30)
    assert r.returncode == 2 and "FIFO" in one_error_line(r.stderr)
    r = bakery_process(tmp_path, "run", "neural_texture", "src/a.png", "-o", bundle, timeout=30)  # run -o's check
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = bakery_process(tmp_path, "clean", "pipeline.toml", timeout=30)
    assert r.returncode == 0 and (bundle / "manifest.json").exists()
    assert listing(tmp_path, skip=("cache",))["out/blur/photos/a/manifest.json"] == before[
        "out/blur/photos/a/manifest.json"]


@pytest.mark.parametrize("plant", ["fifo", "dev_zero", "link_outside"])
def test_listed_files_that_are_not_regular_files_are_refused(tmp_path, plant):
    bundle = _baked(tmp_path)
    victim = bundle / "blurred.png"
    data = victim.read_bytes()
    victim.unlink()
    if plant == "fifo":
        os.mkfifo(victim)
    elif plant == "dev_zero":
        victim.symlink_to("/dev/zero")
    else:
        (tmp_path / "copy.png").write_bytes(data)  # the right bytes, but outside the bundle
        victim.symlink_to(tmp_path / "copy.png")
    before = listing(tmp_path)
    r = bakery_process(tmp_path, "verify", "out", timeout=30)
    assert r.returncode == 1 and "blurred.png" in r.stdout and "regular" in r.stdout, r.stdout
    assert listing(tmp_path) == before


def test_a_bundle_subfolder_linked_outside_is_never_read(tmp_path):
    from bakery.formats.bundle import BundleWriter

    w = BundleWriter(tmp_path / "b")
    w.write_bytes("sub/data.bin", b"inside")
    w.finalize({"stage": {"type": "x", "version": "1"}, "params": {}, "seed": 0, "device": None, "metrics": {}})
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "data.bin").write_bytes(b"inside")
    shutil.rmtree(tmp_path / "b" / "sub")
    (tmp_path / "b" / "sub").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BundleError, match="symbolic link"):
        read_bundle(tmp_path / "b")


def test_a_ktx2_declaring_more_texels_than_the_cap_is_refused_before_inflating():
    import struct

    import numpy as np

    from bakery.formats.ktx2 import HEADER, LEVEL, MAX_TEXTURE_BYTES, read_ktx2, write_ktx2
    from bakery.formats.texture import make_texture

    tex = make_texture("rgba16f", [np.zeros((4, 4, 4), np.float32)])
    data = bytearray(write_ktx2(tex, supercompression="zstd"))
    fields = list(HEADER.unpack_from(data, 0))
    fields[3] = fields[4] = 32768  # width, height: 8 GiB of rgba16f
    HEADER.pack_into(data, 0, *fields)
    off, length, _ = LEVEL.unpack_from(data, HEADER.size)
    LEVEL.pack_into(data, HEADER.size, off, length, 32768 * 32768 * 8)
    assert 32768 * 32768 * 8 > MAX_TEXTURE_BYTES
    with pytest.raises(BundleError, match="more than the"):
        read_ktx2(bytes(data), where="bomb.ktx2")
    assert struct.calcsize("<Q") == 8


# -- 8. the rest: one line and the right exit code --------------------------------------------
def _cache_entry(root: Path) -> Path:
    return next(p for p in (root / "cache" / "entries").iterdir() if p.is_dir())


@pytest.mark.parametrize("damage", ["entry_is_a_file", "sums_cut_short", "sums_is_a_fifo"])
def test_damaged_cache_entries_are_corrupt_and_rebuilt(tmp_path, damage):
    make_project(tmp_path, BASIC_TOML.replace('[stages.summary]\ntype = "test_summary"\ninputs = ["stage:blur"]\n', ""),
                 images=("a",))
    assert bakery(tmp_path, "bake", "pipeline.toml").returncode == 0
    entry = _cache_entry(tmp_path)
    if damage == "entry_is_a_file":
        shutil.rmtree(entry)
        entry.write_text("not an entry")
    elif damage == "sums_cut_short":
        sums = entry / "sums.json"
        sums.write_bytes(sums.read_bytes()[:10])
    else:
        (entry / "sums.json").unlink()
        os.mkfifo(entry / "sums.json")
    before = listing(tmp_path, skip=("out", "cache"))
    r = bakery_process(tmp_path, "bake", "pipeline.toml", timeout=60)  # a FIFO among them: never waited on
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    (task,) = json.loads((tmp_path / "out" / "bake-report.json").read_text())["tasks"]
    assert task["status"] == "built" and "corrupted cache entry" in task["reason"], task
    assert listing(tmp_path, skip=("out", "cache")) == before
    assert bakery(tmp_path, "verify", "out").returncode == 0


def test_run_with_a_negative_seed_is_a_usage_error(tmp_path):
    make_project(tmp_path, images=("a",))
    before = listing(tmp_path)
    r = bakery(tmp_path, "run", "neural_texture", "src/a.png", "-o", "b", "--seed", "-1", *TINY_NEURAL_TEXTURE)
    assert r.returncode == 2 and "--seed" in r.stderr and "Traceback" not in r.stderr
    assert listing(tmp_path) == before


def test_run_sweeps_the_staging_folders_killed_runs_left(tmp_path):
    make_project(tmp_path, images=("a",))
    dead = tmp_path / ".b.staging-999999999-abc"  # no such process
    dead.mkdir()
    (dead / "half.bin").write_text("x")
    alive = tmp_path / f".b.staging-{os.getpid()}-abc"  # still running (this test)
    alive.mkdir()
    mine = tmp_path / ".b.staging-notes"  # a person's, whatever its name says
    mine.mkdir()
    r = bakery(tmp_path, "run", "neural_texture", "src/a.png", "-o", "b", *TINY_NEURAL_TEXTURE)
    assert r.returncode == 0, r.stderr
    assert not dead.exists() and alive.is_dir() and mine.is_dir()


# -- 7. wide images are read as their values, or refused -------------------------------------
def test_float_and_wide_integer_images_are_values_or_refused_never_black(tmp_path):
    import numpy as np
    from PIL import Image

    from bakery.errors import UsageError
    from bakery.formats.images import load_image

    ramp = np.linspace(0.0, 1.0, 32 * 16, dtype=np.float32).reshape(16, 32)
    Image.fromarray(ramp, mode="F").save(tmp_path / "height.tif")
    got = load_image(tmp_path / "height.tif")
    assert got.shape == (16, 32, 1) and np.array_equal(got[..., 0], ramp)  # the values, not 8-bit black
    bad = ramp.copy()
    bad[3, 4] = np.nan
    Image.fromarray(bad, mode="F").save(tmp_path / "nan.tif")
    with pytest.raises(UsageError, match=r"nan\.tif: .*NaN"):
        load_image(tmp_path / "nan.tif")
    Image.fromarray(np.full((8, 8), 1 << 20, np.int32), mode="I").save(tmp_path / "wide.tif")
    with pytest.raises(UsageError, match=r"wide\.tif: 32-bit integer samples"):
        load_image(tmp_path / "wide.tif")
    (tmp_path / "albedo.exr").write_bytes(b"\x76\x2f\x31\x01" + bytes(60))  # cut short
    with pytest.raises(UsageError, match=r"albedo\.exr: cannot read OpenEXR"):
        load_image(tmp_path / "albedo.exr")
    (tmp_path / "sky.hdr").write_bytes(b"#?RADIANCE\n" + bytes(60))
    with pytest.raises(UsageError, match=r"sky\.hdr: Radiance HDR images are not read"):
        load_image(tmp_path / "sky.hdr")


# -- 8. the rest -------------------------------------------------------------------------------
@pytest.mark.parametrize("stem", ["..", ".", "bad\nname"])
def test_asset_names_that_cannot_name_a_folder_are_a_config_error(tmp_path, stem):
    make_project(tmp_path, BASIC_TOML.replace('"src/*.png"', '"src/*.png"' if "\n" in stem else '"src/.*.png"'),
                 images=("a",))
    shutil.copy(tmp_path / "src" / "a.png", tmp_path / "src" / f"{stem}.png")
    before = listing(tmp_path)
    r = bakery(tmp_path, "bake", "pipeline.toml")
    assert r.returncode == 2 and "cannot name an output folder" in r.stderr and "Traceback" not in r.stderr
    assert listing(tmp_path) == before


def test_a_stage_input_to_a_stage_that_reads_no_bundles_is_a_config_error(tmp_path):
    make_project(tmp_path, BASIC_TOML.replace('type = "test_summary"', 'type = "test_blur"'), images=("a",))
    before = listing(tmp_path)
    r = bakery(tmp_path, "bake", "pipeline.toml")
    line = one_error_line(r.stderr)
    assert r.returncode == 2 and "stages.summary.inputs" in line and "not another stage's bundle" in line, line
    assert listing(tmp_path) == before


@pytest.mark.parametrize("code", ["0", "3"])
def test_a_plugin_that_exits_at_import_fails_the_bake(tmp_path, code):
    make_project(tmp_path, BASIC_TOML.replace('plugins = ["pipeline_helpers"]', 'plugins = ["pipeline_helpers", "quitter"]'),
                 images=("a",))
    (tmp_path / "quitter.py").write_text(f"import sys\nsys.exit({code})\n")
    before = listing(tmp_path)
    r = bakery(tmp_path, "bake", "pipeline.toml")
    assert r.returncode == 2 and "quitter" in one_error_line(r.stderr) and "exited" in r.stderr
    assert listing(tmp_path, skip=("__pycache__",)) == before


def test_a_proposer_commands_children_die_with_it(tmp_path):
    from bakery.stages.procedural.proposers import run_in_own_group

    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_own_group(["sh", "-c", script], "", timeout=1.0)
    assert time.monotonic() - t0 < 10
    pid = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the proposer's child outlived it")


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_a_ray_address_with_no_cluster_is_one_line(tmp_path, address):
    pytest.importorskip("ray")
    make_project(tmp_path, images=("a",))
    before = listing(tmp_path, skip=("out", "cache"))
    r = bakery_process(tmp_path, "bake", "pipeline.toml", "--runner", "ray", "--address", address, timeout=60)
    assert r.returncode == 2 and "--address" in one_error_line(r.stderr), r.stderr
    assert listing(tmp_path, skip=("out", "cache")) == before


def test_sigterm_ends_a_ray_bake_with_143_and_no_stack_dump(tmp_path):
    from pipeline_helpers import SLEEP_TOML, bake_until_started

    pytest.importorskip("ray")
    make_project(tmp_path, SLEEP_TOML.format(seconds=60.0, tag="x"), images=("a",))
    started = tmp_path / "started"
    env = {**_env(), "BAKERY_TEST_STARTED": str(started), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    p = bake_until_started(tmp_path, env, "--runner", "ray", timeout=120)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143 and "interrupted" in err, err
    assert "Traceback" not in err and "Fatal Python error" not in err and "Stack (most recent" not in err, err


def test_verify_ignores_publish_leftovers_whatever_they_hold(tmp_path):
    bundle = _baked(tmp_path)
    aside = bundle.with_name(bundle.name + ".bakery-old")
    shutil.copytree(bundle, aside)
    (aside / "blurred.png").write_bytes(b"half of an old bundle")
    before = listing(tmp_path)
    r = bakery(tmp_path, "verify", "out")
    assert r.returncode == 0 and "0 bad, 1 leftover(s) ignored" in r.stdout, r.stdout + r.stderr
    r = bakery(tmp_path, "verify", "--json", "out")
    assert json.loads(r.stdout)["ignored"] == [str(Path("out/blur/photos/a.bakery-old"))]
    assert listing(tmp_path) == before


def test_a_full_disk_names_the_path_it_could_not_write(tmp_path):
    import resource

    make_project(tmp_path, images=("a",))
    assert bakery(tmp_path, "bake", "pipeline.toml").returncode == 0
    (tmp_path / "pipeline.toml").write_text(BASIC_TOML.replace("radius = 1", "radius = 2"))
    before = listing(tmp_path, skip=("out", "cache"))

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))

    r = subprocess.run([sys.executable, "-m", "bakery", "bake", "pipeline.toml"], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=120, preexec_fn=small_disk)
    line = one_error_line(r.stderr)
    assert r.returncode == 1 and "disk full" in line and "out/" in line.split(": file system error")[0], line
    assert listing(tmp_path, skip=("out", "cache")) == before


def _rgb16_tiff(path: Path, data, compression: int = 1) -> Path:
    """A little-endian 16-bit RGB TIFF in one strip (``compression`` 1: none)."""
    import struct

    h, w, _ = data.shape
    pix = data.astype("<u2").tobytes()
    tags = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 3, 8 + 2 + 10 * 12 + 4), (259, 3, 1, compression),
            (262, 3, 1, 2), (273, 4, 1, 8 + 2 + 10 * 12 + 4 + 6), (277, 3, 1, 3), (278, 4, 1, h),
            (279, 4, 1, len(pix)), (284, 3, 1, 1)]
    ifd = struct.pack("<H", len(tags)) + b"".join(struct.pack("<HHII", *t) for t in tags) + struct.pack("<I", 0)
    path.write_bytes(b"II*\x00" + struct.pack("<I", 8) + ifd + struct.pack("<HHH", 16, 16, 16) + pix)
    return path


def test_16_bit_colour_tiffs_keep_their_precision_or_are_refused(tmp_path):
    import numpy as np

    from bakery.errors import UsageError
    from bakery.formats.images import load_image

    data = (np.arange(6 * 4 * 3, dtype=np.uint16) * 911 + 7).reshape(4, 6, 3)
    got = load_image(_rgb16_tiff(tmp_path / "albedo.tif", data))
    assert np.array_equal(np.round(got * 65535).astype(np.uint16), data)  # both bytes of every sample
    with pytest.raises(UsageError, match=r"lzw\.tif: a 16-bit colour TIFF that is compressed"):
        load_image(_rgb16_tiff(tmp_path / "lzw.tif", data, compression=5))
