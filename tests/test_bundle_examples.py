"""The engine examples cannot run here, but the parts that only read the format can:
the Unreal script's checks run against a real bundle (with a stub `unreal` module), and
the Unity importer's manifest regex matches what BundleWriter writes."""

from __future__ import annotations

import importlib.util
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
    assert len(files) == 4
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
