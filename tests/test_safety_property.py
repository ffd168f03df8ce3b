"""Property test of the safety guarantees (issue 9, docs/PIPELINE.md "Safety").

Random sequences of bake / edit a source / edit params / clean / SIGKILL a bake at a random
moment / decompress an NTC bundle into a random folder / plant a symbolic link inside
``out/`` or the cache (to a folder or file outside both) then bake or clean, over a small
real pipeline (a numpy stage and a neural_texture stage training a
few steps on 16² and 32² textures on the machine's default device: lavapipe on a CPU, the
GPU where there is one). After every step no file outside ``out/`` and the cache differs
from what the test itself wrote, engine files put inside bundles survive everything but
``clean``, a planted link's target is never written through, and after a final bake
``bakery verify out`` passes. Seeded: the same sequences
and kill moments on every run.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ntc_bundles import write_ntc_bundle
from pipeline_helpers import write_image

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SEED = 9
SEQUENCES = 3
STEPS = 6
OPS = ("bake", "kill", "kill", "edit_source", "edit_params", "clean", "decompress", "plant")
#: Links a person (or an attacker) might leave inside bakery's folders.
PLANTS = ("out/.bakery.lock", "out/blur", "out/fit/photos", "out/logs/blur", "cache/entries", "cache/records",
          "out/report.html")

TOML = """\
[project]
out = "out"
cache = "cache"
device = "auto"
plugins = ["pipeline_helpers"]

[assets.photos]
image = "src/*.png"

[stages.blur]
type = "test_blur"
inputs = ["photos"]
params = {{ radius = {radius} }}

[stages.fit]
type = "neural_texture"
inputs = ["photos"]
params = {{ steps = {steps}, batch = 256, width = 8, layers = 1, octaves = 2 }}
"""


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bakery", *args]


def outside_snapshot(root: Path) -> dict[str, str]:
    """Every file outside out/ and cache/, by content."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] not in ("out", "cache")}


class Project:
    def __init__(self, root: Path, rng: random.Random):
        self.root, self.rng = root, rng
        self.params = {"radius": 1, "steps": 8}
        self.meta: set[Path] = set()  # engine files the test put inside bundles
        for name, size in (("a", 16), ("b", 32)):
            write_image(root / "src" / f"{name}.png", seed=rng.randrange(1000), size=size)
        write_ntc_bundle(root / "shipped" / "ntc_set", mips=False)  # a bundle from elsewhere, to decompress
        (root / "elsewhere" / "folder").mkdir(parents=True)
        (root / "elsewhere" / "folder" / "keep.txt").write_text("a person's file")
        (root / "elsewhere" / "file.txt").write_text("a person's file")
        self.write_toml()
        self.expected = outside_snapshot(root)

    def write_toml(self) -> None:
        (self.root / "pipeline.toml").write_text(TOML.format(**self.params))

    def bake(self) -> None:
        r = subprocess.run(_cmd("bake", "pipeline.toml"), cwd=self.root, env=_env(), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        lost = sorted(str(p) for p in self.meta if not p.is_file())
        assert not lost, f"a bake deleted engine files: {lost}"
        for manifest in (self.root / "out").rglob("manifest.json"):  # what Unity adds on import
            meta = manifest.parent / "manifest.json.meta"
            if not meta.exists():
                meta.write_text(f"fileFormatVersion: 2\nguid: {self.rng.getrandbits(64):016x}\n")
                self.meta.add(meta)

    def kill(self) -> None:
        p = subprocess.Popen(_cmd("bake", "pipeline.toml"), cwd=self.root, env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(self.rng.uniform(0.3, 6.0))
        p.kill()
        p.wait(timeout=30)

    def edit_source(self) -> None:
        name = self.rng.choice(("a", "b"))
        write_image(self.root / "src" / f"{name}.png", seed=self.rng.randrange(1000), size=16 if name == "a" else 32)
        self.expected = outside_snapshot(self.root)

    def edit_params(self) -> None:
        name = self.rng.choice(sorted(self.params))
        choices = {"radius": range(0, 4), "steps": range(4, 13)}[name]
        self.params[name] = self.rng.choice([v for v in choices if v != self.params[name]])
        self.write_toml()
        self.expected = outside_snapshot(self.root)

    def clean(self) -> None:
        r = subprocess.run(_cmd("clean", "pipeline.toml"), cwd=self.root, env=_env(), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        self.meta.clear()

    def decompress(self) -> None:
        target = self.rng.choice(["decoded", "decoded", "src", "elsewhere/folder", "out"])
        r = subprocess.run(_cmd("decompress", "shipped/ntc_set", "-o", target), cwd=self.root, env=_env(),
                           capture_output=True, text=True, timeout=120)
        assert "Traceback" not in r.stderr, r.stderr
        if target == "decoded":  # a new folder, then its own: written
            assert r.returncode == 0, r.stderr
            self.expected = {**{k: v for k, v in self.expected.items() if not k.startswith("decoded/")},
                             **{k: v for k, v in outside_snapshot(self.root).items() if k.startswith("decoded/")}}
        else:  # a source folder, a person's folder, bakery's out/: refused, in one line
            assert r.returncode == 2 and len([x for x in r.stderr.splitlines() if "error:" in x]) == 1, r.stderr

    def plant(self) -> None:
        where = self.root / self.rng.choice(PLANTS)
        target = self.root / "elsewhere" / ("file.txt" if where.suffix in (".lock", ".html") else "folder")
        if where.is_dir() and not where.is_symlink():
            shutil.rmtree(where)
        elif where.exists() or where.is_symlink():
            where.unlink()
        self.meta = {p for p in self.meta if p.is_file()}
        where.parent.mkdir(parents=True, exist_ok=True)
        where.symlink_to(target)
        op = self.rng.choice(("bake", "clean"))
        r = subprocess.run(_cmd(op, "pipeline.toml"), cwd=self.root, env=_env(), capture_output=True, text=True,
                           timeout=300)
        assert "Traceback" not in r.stderr and r.returncode in (0, 1, 2), r.stderr
        assert outside_snapshot(self.root) == self.expected, (op, where, r.stderr)
        assert where.is_symlink(), f"{op} removed the planted link {where}"
        where.unlink()
        if op == "clean":
            self.meta.clear()

    def check(self, history: list[str]) -> None:
        assert outside_snapshot(self.root) == self.expected, history
        missing = [p for p in self.meta if not p.is_file()]
        assert not missing, (history, missing)


def test_random_bake_edit_clean_kill_sequences_touch_nothing_outside_out_and_cache(tmp_path):
    rng = random.Random(SEED)
    for s in range(SEQUENCES):
        project = Project(tmp_path / f"seq{s}", rng)
        history: list[str] = []
        for _ in range(STEPS):
            op = rng.choice(OPS)
            history.append(op)
            getattr(project, op)()
            project.check(history)
        project.bake()
        history.append("final bake")
        project.check(history)
        r = subprocess.run(_cmd("verify", "out"), cwd=project.root, env=_env(), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and "0 bad" in r.stdout, (history, r.stdout, r.stderr)
        assert not list(project.root.rglob(".*.staging-*")), history
