"""What a cached re-bake and ``bakery --help`` load: planning learns the toolchain from
the installed files and the Vulkan loader, so nothing that only a build needs (slangpy,
plotting, the browser, Ray) is imported, and no device is opened. Checked in fresh
processes through ``sys.modules``, never by timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bakery.device import installed_compiler_versions
from bakery.pipeline.cli import bake_cmd

from pipeline_helpers import make_project
from test_kernel_cache import TEXTURE_TOML

REPO = Path(__file__).resolve().parent.parent
#: Imported only to build: the compiler, report plots, image metrics, ONNX, browser, cluster.
BUILD_ONLY = ("slangpy", "matplotlib", "flip_evaluator", "onnx", "playwright", "ray", "torch")
SHOW_IMPORTS = ("import json, sys\n"
                "try:\n"
                "    {call}\n"
                "finally:\n"
                "    print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))))\n")


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), str(REPO / "tests"),
                                                                  os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_installed_files_name_the_compiler_the_import_reports():
    import slangpy as spy

    assert installed_compiler_versions() == (str(spy.__version__), str(spy.SLANG_BUILD_TAG))


#: Prints what the installed files say, what planning (slangpy not imported) and a worker
#: (slangpy imported) report, and what slangpy says, for a slangpy found through PYTHONPATH.
BOTH_READINGS = ("import json, sys\n"
                 "from bakery.device import compiler_versions, installed_compiler_versions\n"
                 "files = installed_compiler_versions()\n"
                 "assert 'slangpy' not in sys.modules\n"
                 "planned = compiler_versions()\n"
                 "import slangpy\n"
                 "print(json.dumps([files, planned, compiler_versions(), [slangpy.__version__, slangpy.SLANG_BUILD_TAG]]))\n")


def _slangpy_at(target: Path, *dist_versions: str) -> None:
    """A stand-in slangpy installed into ``target`` as ``pip install --target`` lays it
    out: the package (version 9.1.0, Slang 2099.1) and a metadata folder per version."""
    package = target / "slangpy"
    (package / "slang-standard-module-2099.1").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "9.1.0"\nSLANG_BUILD_TAG = "2099.1"\n')
    for v in dist_versions:
        (target / f"slangpy-{v}.dist-info").mkdir()
        (target / f"slangpy-{v}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: slangpy\nVersion: {v}\n")


@pytest.mark.parametrize("dists,files", [
    (("9.1.0",), ["9.1.0", "2099.1"]),  # --target DIR on PYTHONPATH, another slangpy in site-packages
    (("9.0.0", "9.1.0"), None),  # --target --upgrade left the old version's metadata: ambiguous
    ((), None)])  # the package without its metadata (copied): the site-packages one's is not its own
def test_the_installed_files_never_name_another_slangpy_than_the_import(tmp_path, dists, files):
    _slangpy_at(tmp_path / "site", *dists)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(tmp_path / "site"), str(REPO))))
    r = subprocess.run([sys.executable, "-c", BOTH_READINGS], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    read, planned, opened, imported = json.loads(r.stdout)
    assert read == files
    assert planned == opened == imported == ["9.1.0", "2099.1"]  # before and after the import alike


def test_a_cached_rebake_imports_nothing_only_a_build_needs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, TEXTURE_TOML, images=("a", "b"))
    assert CliRunner().invoke(bake_cmd, ["pipeline.toml"]).exit_code == 0  # fills the cache

    call = "from bakery.pipeline.cli import bake_cmd; bake_cmd(['pipeline.toml'], standalone_mode=False)"
    r = _python(SHOW_IMPORTS.format(call=call, heavy=BUILD_ONLY), tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == []
    report = json.loads((tmp_path / "out" / "bake-report.json").read_text())
    assert report["totals"]["cached"] == report["totals"]["total"] == 2
    assert report["device"] is None  # no device opened

    help_call = "from bakery.cli import main; main(['--help'], standalone_mode=False)"
    r = _python(SHOW_IMPORTS.format(call=help_call, heavy=BUILD_ONLY), tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == []
