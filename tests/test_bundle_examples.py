"""The engine examples cannot run here, but the parts that only read the format can:
the Unreal script's checks run against a real bundle (with a stub `unreal` module), and
the Unity importer's manifest regex matches what BundleWriter writes."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from bakery.formats.bundle import BundleWriter
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec

ENGINES = Path(__file__).resolve().parents[1] / "examples" / "engines"


@pytest.fixture
def bundle(tmp_path):
    spec = NetworkSpec(FrequencyEncoding(2, 3), (16,), 3, "tanh", "identity")
    w = BundleWriter(tmp_path / "b")
    w.write_weights("weights.bin", spec, spec.init_params(0))
    w.write_texture("latents.dds", "rgba16f", [np.zeros((4, 4, 4))])
    w.finalize({"stage": {"type": "fit", "version": "1"}, "params": {}, "seed": 0, "device": {}, "metrics": {}})
    return tmp_path / "b"


def test_every_example_says_it_is_untested():
    files = [p for p in ENGINES.rglob("*") if p.suffix in (".py", ".cs", ".gd")]
    assert len(files) == 5
    for p in files:
        assert "UNTESTED IN" in p.read_text()[:600], p


def test_unreal_script_checks_a_real_bundle(bundle, monkeypatch):
    monkeypatch.setitem(sys.modules, "unreal", types.ModuleType("unreal"))
    spec = importlib.util.spec_from_file_location("unreal_import_bundle", ENGINES / "unreal_import_bundle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    manifest = mod.verify(str(bundle))
    net = mod.read_weights_header(str(bundle / "weights.bin"))
    assert net == {"dtype": "float16", "layers": [(12, 16, "tanh", 128, 512), (16, 3, "identity", 576, 672)]}
    (bundle / "latents.dds").write_bytes(b"x")
    with pytest.raises(RuntimeError, match="latents.dds"):
        mod.verify(str(bundle))
    assert manifest["stage"]["type"] == "fit"


def test_unreal_script_reads_no_file_outside_the_bundle(bundle, tmp_path, monkeypatch):
    import json

    monkeypatch.setitem(sys.modules, "unreal", types.ModuleType("unreal"))
    spec = importlib.util.spec_from_file_location("unreal_import_bundle", ENGINES / "unreal_import_bundle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"not the bundle's")
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name in ("../secret.bin", str(secret)):
        manifest["files"][0]["name"] = name
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(RuntimeError, match="outside the bundle"):
            mod.verify(str(bundle))
    manifest["files"][0]["name"] = "linked.bin"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    try:
        (bundle / "linked.bin").symlink_to(secret)
    except OSError:
        pytest.skip("no symlinks here")
    with pytest.raises(RuntimeError, match="a link"):
        mod.verify(str(bundle))


def test_unity_manifest_regex_matches_writer_output(bundle):
    cs = (ENGINES / "Unity" / "Editor" / "BakeryWeightsImporter.cs").read_text()
    literal = re.search(r'Regex\.Match\(json, "(.*?)" \+ name \+ "(.*?)"\);', cs)
    prefix, suffix = (bytes(s, "utf-8").decode("unicode_escape") for s in literal.groups())
    m = re.search(prefix + re.escape("weights.bin") + suffix, (bundle / "manifest.json").read_text())
    assert m is not None
    import hashlib
    data = (bundle / "weights.bin").read_bytes()
    assert int(m.group(1)) == len(data) and m.group(2) == hashlib.sha256(data).hexdigest()


def test_unity_asset_type_is_a_runtime_script_and_unreal_keeps_data_linear(monkeypatch):
    """The ScriptableObject lives outside Editor/ in a file of its name; the Unreal script
    gives latents 8-bit linear data and BC4/BC5 no sRGB, and gives no Custom-node advice."""
    runtime = (ENGINES / "Unity" / "Runtime" / "BakeryNetwork.cs").read_text()
    assert "class BakeryNetwork : ScriptableObject" in runtime and "UnityEditor" not in runtime
    assert "class BakeryNetwork" not in (ENGINES / "Unity" / "Editor" / "BakeryWeightsImporter.cs").read_text()
    C = types.SimpleNamespace(TC_VECTOR_DISPLACEMENTMAP="vdm", TC_ALPHA="alpha", TC_NORMALMAP="normal",
                              TC_DEFAULT="default", TC_HDR="hdr")
    monkeypatch.setitem(sys.modules, "unreal", types.SimpleNamespace(TextureCompressionSettings=C))
    spec = importlib.util.spec_from_file_location("unreal_import_bundle", ENGINES / "unreal_import_bundle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.texture_settings("latents_0.dds", "latents", "rgba8_unorm") == (False, "vdm")
    assert mod.texture_settings("transcoded_roughness.dds", "transcoded", "bc4_unorm") == (False, "alpha")
    assert mod.texture_settings("transcoded_normal.dds", "transcoded", "bc5_unorm") == (False, "normal")
    assert mod.texture_settings("transcoded_albedo.dds", "transcoded", "bc7_srgb") == (True, "default")
    text = (ENGINES / "unreal_import_bundle.py").read_text()
    assert "paste decoder.hlsl" not in text and "TC_HDR" not in text


def _unreal_module(monkeypatch):
    C = types.SimpleNamespace(TC_VECTOR_DISPLACEMENTMAP="vdm", TC_ALPHA="alpha", TC_NORMALMAP="normal",
                              TC_DEFAULT="default")
    monkeypatch.setitem(sys.modules, "unreal", types.SimpleNamespace(TextureCompressionSettings=C))
    spec = importlib.util.spec_from_file_location("unreal_import_bundle", ENGINES / "unreal_import_bundle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bakery_command(monkeypatch) -> str:
    """This checkout's bakery as a command line (what an engine's machine has on PATH)."""
    kept = os.environ.get("PYTHONPATH")   # where the machine's own packages come from (a --target site)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ENGINES.parents[1])] + ([kept] if kept else [])))
    return f"{sys.executable} -m bakery"


def test_unreal_script_decodes_an_ntc_bundle_on_load_to_bcn_with_mips(tiny_out, tmp_path, monkeypatch):
    """The ntc path of the Unreal script on a real bundle: verify, `bakery decompress
    --format dds`, one DDS per role with every colour mip, imported with settings by format."""
    from bakery.formats.dds import read_dds

    mod = _unreal_module(monkeypatch)
    bundle = tiny_out / "compress" / "bricks"
    manifest = mod.verify(str(bundle))
    decoded = mod.ntc_to_dds(str(bundle), str(tmp_path), _bakery_command(monkeypatch))
    roles = manifest["ntc"]["material"]["roles"]
    assert sorted(decoded) == sorted(f"{r}.dds" for r in roles)
    assert (decoded["albedo.dds"], decoded["normal.dds"], decoded["roughness.dds"]) == ("bc7_srgb", "bc5_unorm",
                                                                                        "bc4_unorm")
    for name in decoded:
        tex = read_dds((tmp_path / name).read_bytes())
        assert tex.level_count == len(manifest["ntc"]["latents"]["color_mips"]), name
    assert mod.texture_settings("albedo.dds", "decoded", decoded["albedo.dds"]) == (True, "default")
    assert mod.texture_settings("normal.dds", "decoded", decoded["normal.dds"]) == (False, "normal")


def test_unreal_script_imports_a_mipmap_bundles_chains_not_its_baseline(tiny_out, monkeypatch):
    """A mipmap bundle ships the Toksvig chain as its baseline (role ``baseline``) beside
    the trained textures; the Unreal script imports the trained DDS files only."""
    mod = _unreal_module(monkeypatch)
    bundle = tiny_out / "mips" / "bricks"
    manifest = mod.verify(str(bundle))
    imported = {}
    monkeypatch.setattr(mod, "import_files", lambda files, destination: imported.update(files))
    mod.import_textures(str(bundle), manifest, "/Game/bricks")
    assert sorted(Path(p).name for p in imported) == ["albedo.dds", "normal.dds", "roughness.dds"]
    assert (bundle / "toksvig_roughness.dds").is_file()


def test_unity_ntc_importer_command_decodes_a_real_bundle(tiny_out, tmp_path, monkeypatch):
    """The arguments the Unity menu passes to bakery, run on a real ntc bundle."""
    import shlex
    import subprocess

    cs = (ENGINES / "Unity" / "Editor" / "BakeryNtcImporter.cs").read_text()
    template = re.search(r'return \$"(decompress .*?)";', cs).group(1)
    bundle, dest = tiny_out / "compress" / "bricks", tmp_path / "Assets" / "Baked" / "bricks"
    args = template.replace("{bundle}", str(bundle)).replace("{destination}", str(dest)).replace('\\"', '"')
    r = subprocess.run([*shlex.split(_bakery_command(monkeypatch)), *shlex.split(args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in dest.glob("*.dds")} >= {"albedo.dds", "normal.dds", "roughness.dds"}


def test_godot_plugin_claims_only_bundle_manifests(tiny_out):
    """No file extension is claimed (latents.bin and other JSON stay untouched); its
    manifest rule accepts every real bundle's manifest and nothing else named like it."""
    import json

    gd = (ENGINES / "godot" / "bakery_bundle_import.gd").read_text()
    assert "_get_recognized_extensions" not in gd and "extends EditorPlugin" in gd
    keys = json.loads(re.search(r"const REQUIRED_KEYS := (\[.*?\])", gd).group(1))
    schema = int(re.search(r"const SCHEMA_VERSION := (\d+)", gd).group(1))

    def is_bundle_manifest(doc) -> bool:   # the plugin's rule, as written there
        return isinstance(doc, dict) and all(k in doc for k in keys) and int(doc["schema_version"]) == schema

    for manifest in tiny_out.rglob("manifest.json"):
        assert is_bundle_manifest(json.loads(manifest.read_text())), manifest
    assert not is_bundle_manifest(json.loads((ENGINES.parents[1] / "package.json").read_text()))
    assert not is_bundle_manifest({"name": "some other manifest.json", "files": []})
