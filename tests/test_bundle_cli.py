"""`bakery inspect` / `bakery verify`: output, exit codes (inspect 2, verify 1) and a one-line error on bad bundles."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from bakery.formats.bundle import BundleWriter
from bakery.formats.cli import inspect_cmd, verify_cmd
from bakery.formats.publish import aside_path
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec


def make(folder):
    spec = NetworkSpec(FrequencyEncoding(2, 3), (16,), 3)
    w = BundleWriter(folder)
    w.write_weights("weights.bin", spec, spec.init_params(0))
    w.write_texture("latents.ktx2", "rgba8_unorm", [np.zeros((4, 4, 4))])
    return w.finalize({"stage": {"type": "fit", "version": "1"}, "params": {"steps": 5}, "seed": 3,
                       "device": {"backend": "vulkan", "adapter": "llvmpipe", "software": True},
                       "metrics": {"psnr": 28.5}})


def test_inspect_summary_and_json(tmp_path):
    manifest = make(tmp_path / "b")
    r = CliRunner().invoke(inspect_cmd, [str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert "stage    fit v1" in r.output and "2 -> 12 -> 16 -> 3" in r.output and "psnr=28.5" in r.output
    assert "rgba8_unorm 4x4 mips=1 layers=1" in r.output and "(software)" in r.output
    r = CliRunner().invoke(inspect_cmd, [str(tmp_path / "b"), "--json"])
    assert r.exit_code == 0 and json.loads(r.output) == manifest


def test_inspect_bad_bundle_exits_2_with_one_line(tmp_path):
    make(tmp_path / "b")
    (tmp_path / "b" / "weights.bin").write_bytes(b"\0" * 8)
    r = CliRunner().invoke(inspect_cmd, [str(tmp_path / "b")])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "weights.bin" in lines[0] and "size mismatch" in lines[0]
    assert CliRunner().invoke(inspect_cmd, [str(tmp_path / "nope")]).exit_code == 2


def test_verify_tree(tmp_path):
    make(tmp_path / "out" / "fit" / "a")
    make(tmp_path / "out" / "fit" / "b")
    r = CliRunner().invoke(verify_cmd, [str(tmp_path / "out")])
    assert r.exit_code == 0 and "2 ok, 0 bad" in r.output
    (tmp_path / "out/fit/b/latents.ktx2").write_bytes(b"junk")
    aside_path(tmp_path / "out/fit/c").mkdir()
    r = CliRunner().invoke(verify_cmd, [str(tmp_path / "out")])
    assert r.exit_code == 1 and "1 ok, 1 bad, 1 leftover(s) ignored" in r.output
    assert "FAIL" in r.output and "latents.ktx2" in r.output and "skip" in r.output and "interrupted publish" in r.output
    assert len(r.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(verify_cmd, [str(empty)])
    assert r.exit_code == 2 and "no bundles" in r.stderr


def test_inspect_bundle_of_a_stage_without_device(tmp_path):
    w = BundleWriter(tmp_path / "b")
    w.write_bytes("data.bin", b"abc")
    w.finalize({"stage": {"type": "copy", "version": "1"}, "params": {}, "seed": 0, "device": None, "metrics": {}})
    r = CliRunner().invoke(inspect_cmd, [str(tmp_path / "b")])
    assert r.exit_code == 0 and "no device used" in r.output
