"""Stage `procedural`: the DSL, its shader emission, the fitting/search, and the stage."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.formats.images import encode_png
from bakery.imaging import psnr
from bakery.stages.procedural import codegen, dsl, fit, proposers, texture_stats
from bakery.stages.procedural.render import render_shader

SIZE = 64


def ramp(child, colours, positions=(0.0, 1.0)):
    return {"op": "ramp", "attrs": {"stops": len(positions)},
            "params": {"positions": list(positions), "colours": list(colours)}, "inputs": [child]}


#: Known small programs the search must recover (the issue's striped gradient, checker
#: with a colour ramp, bricks).
GENERATORS = {
    "striped_gradient": ramp({"op": "add", "inputs": [
        {"op": "stripes_sine", "params": {"k": [6, 2], "phase": [0.3]}},
        {"op": "linear_gradient", "params": {"k": [0.5, 0], "offset": [0]}}]},
        [0.1, 0.1, 0.4, 1.0, 0.9, 0.3], (0.0, 1.5)),
    "checker_ramp": ramp({"op": "checker", "params": {"frequency": [8], "offset": [0.1, 0.2], "sharpness": [30]}},
                         [0.1, 0.2, 0.3, 0.9, 0.8, 0.6]),
    "bricks": ramp({"op": "bricks", "params": {"count": [4, 8], "offset": [0, 0], "mortar": [0.012],
                                               "sharpness": [400]}}, [0.8, 0.8, 0.75, 0.6, 0.2, 0.1]),
}

#: Exercises every operator once.
EVERY_OP = {"op": "add", "inputs": [
    {"op": "mix", "inputs": [
        {"op": "threshold", "params": {"level": [0.5], "sharpness": [8]}, "inputs": [
            {"op": "multiply", "inputs": [
                {"op": "fbm", "attrs": {"octaves": 3, "basis": "value"},
                 "params": {"frequency": [5], "gain": [0.5], "offset": [1, 2]}},
                {"op": "worley", "params": {"frequency": [6], "jitter": [0.8], "offset": [0, 1]}}]}]},
        ramp({"op": "warp", "params": {"frequency": [3], "amplitude": [0.1], "offset": [2, 3]}, "inputs": [
            {"op": "stripes_saw", "params": {"k": [3, 1], "phase": [0.2]}}]}, [0.2, 0.1, 0.0, 0.9, 0.5, 0.2]),
        ramp({"op": "polar", "params": {"center": [0.5, 0.5], "scale": [2]}, "inputs": [
            {"op": "add", "inputs": [
                {"op": "gradient_noise", "params": {"frequency": [4], "offset": [0, 0]}},
                {"op": "value_noise", "params": {"frequency": [8], "offset": [3, 1]}}]}]},
             [0.0, 0.3, 0.1, 0.5, 0.7, 0.2, 1.0, 1.0, 0.9], (0.2, 0.6, 0.9))]},
    {"op": "multiply", "inputs": [
        {"op": "constant", "params": {"colour": [0.2, 0.2, 0.2]}},
        ramp({"op": "add", "inputs": [
            {"op": "radial_gradient", "params": {"center": [0.3, 0.4], "scale": [1], "offset": [0]}},
            {"op": "bricks", "params": {"count": [3, 6], "offset": [0, 0], "mortar": [0.02], "sharpness": [200]}}]},
            [1, 1, 1, 0, 0, 0])]}]}


#: The stage's CPU preset, pinned: left at 0 ("auto") a GPU would run its hardware preset
#: (6 generations x 48 structures x 8 restarts x 600 steps at 256^2, about a minute an image).
CPU_PRESET = ("generations=2", "population=12", "beam=2", "restarts=3", "steps=120", "batch=1024", "fit_size=64",
              "refine_steps=150")
#: One generation of a few small fits: the same on every device.
SMALL = ("generations=1", "population=4", "beam=2", "restarts=2", "steps=40", "batch=1024", "fit_size=64",
         "refine_steps=150")


def program(obj) -> dsl.Node:
    return dsl.from_json(obj, require_params=True)


def write_png(path: Path, image: np.ndarray) -> Path:
    path.write_bytes(encode_png(image))
    return path


def run_stage(image: Path, out: Path, *params: str, seed: int = 1):
    args = ["run", "procedural", str(image), "-o", str(out), "--seed", str(seed)]
    for p in params:
        args += ["--param", p]
    return CliRunner().invoke(main, args)


# -- the DSL ---------------------------------------------------------------------------------
def test_program_json_round_trips_and_counts_nodes():
    node = program(EVERY_OP)
    assert dsl.from_json(dsl.program_document(node)) == dsl.from_json(json.loads(json.dumps(dsl.program_document(node))))
    assert dsl.complexity(program(GENERATORS["striped_gradient"])) == 4
    assert dsl.complexity(node) == len(list(node.walk())) == 20
    assert dsl.instructions(node) > dsl.instructions(program(GENERATORS["checker_ramp"])) > 0
    values = dsl.flatten(node)
    assert values.size == dsl.param_count(node)
    assert dsl.with_params(node.structure(), values) == dsl.from_json(dsl.program_document(node))


@pytest.mark.parametrize("bad, problem", [
    ({"op": "spiral"}, "unknown op 'spiral'"),
    ({"op": "checker"}, "must produce a colour"),
    ({"op": "ramp", "inputs": [{"op": "constant"}]}, "needs a field, got a colour"),
    ({"op": "ramp", "attrs": {"stops": 7}, "inputs": [{"op": "checker"}]}, "attrs.stops: 7 not in"),
    ({"op": "ramp", "inputs": [{"op": "checker", "params": {"frequency": [1, 2]}}]}, "params.frequency"),
    ({"op": "add", "inputs": [{"op": "constant"}, {"op": "checker"}]}, "inputs of one type"),
    ([1, 2], "expected an object"),
])
def test_malformed_programs_are_refused_with_the_path(bad, problem):
    with pytest.raises(dsl.ProgramError, match=problem):
        dsl.from_json(bad)


# -- shader emission -------------------------------------------------------------------------
def test_emitted_slang_renders_what_the_search_evaluates(device):
    for obj in (EVERY_OP, *GENERATORS.values()):
        node = program(obj)
        searched = fit.render_program(device, node, SIZE, SIZE)
        shipped = render_shader(device, node, SIZE, SIZE)
        assert np.isfinite(searched).all()
        np.testing.assert_allclose(shipped, searched, atol=2e-5)
    assert searched.std() > 0.05  # a real image, not a constant


def test_hlsl_and_glsl_sources_define_the_function():
    node = program(EVERY_OP)
    for lang in codegen.LANGUAGES:
        text = codegen.generate(node, lang)
        assert "bakery_procedural(" in text and "bk_fbm(" in text
        assert "[Differentiable]\n" not in text and "no_diff" not in text
    glsl = codegen.generate(node, "glsl")
    assert "#define float3 vec3" in glsl and "bk_mix_mask(" in glsl and "static const" not in glsl


@pytest.mark.skipif(shutil.which("glslangValidator") is None, reason="needs glslangValidator (Debian glslang-tools)")
@pytest.mark.parametrize("lang", ["glsl", "hlsl"])
def test_glsl_and_hlsl_compile_with_glslang(tmp_path, lang):
    text = codegen.generate(program(EVERY_OP), lang)
    if lang == "glsl":
        src = tmp_path / "p.comp"
        src.write_text("#version 450\n" + text + "\nlayout(local_size_x = 64) in;\n"
                       "layout(std430, binding = 0) buffer O { float o[]; };\n"
                       "void main() { vec3 c = bakery_procedural(vec2(gl_GlobalInvocationID.xy) / 64.0);"
                       " o[gl_GlobalInvocationID.x] = c.x + c.y + c.z; }\n")
        args = ["glslangValidator", "-V", str(src)]
    else:
        src = tmp_path / "p.hlsl"
        src.write_text(text + "\nRWStructuredBuffer<float> o;\n[numthreads(64, 1, 1)]\n"
                       "void main(uint3 t: SV_DispatchThreadID) { float3 c = bakery_procedural(float2(t.xy) / 64.0);"
                       " o[t.x] = c.x + c.y + c.z; }\n")
        args = ["glslangValidator", "-D", "-V", "-S", "comp", "-e", "main", str(src)]
    r = subprocess.run(args + ["-o", str(tmp_path / "out.spv")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# -- fitting ---------------------------------------------------------------------------------
def test_texture_term_matches_appearance_of_a_stochastic_target(device):
    """A noise target: fitting with the texture term lowers the texture loss far below
    what pixel L2 alone reaches (which blurs towards the mean)."""
    target_node = program(ramp({"op": "fbm", "attrs": {"octaves": 4, "basis": "gradient"},
                                "params": {"frequency": [6], "gain": [0.6], "offset": [0, 0]}},
                               [0.1, 0.05, 0.0, 0.9, 0.7, 0.4]))
    target = fit.render_program(device, target_node, SIZE, SIZE)
    stats = texture_stats.statistics(target)
    other_seed = dsl.flatten(target_node)
    other_seed[-2:] += (37.0, 11.0)  # same texture, different noise phase
    init = other_seed.copy()
    init[8] *= 0.6  # wrong frequency
    losses = {}
    for tw in (0.0, 3.0):
        (r,) = fit.fit_jobs(device, target, stats, [target_node.structure()], [(0, init)],
                            fit.FitConfig(steps=150, batch=SIZE * SIZE, texture_weight=tw))
        losses[tw] = r.texture_loss
    assert losses[3.0] < 0.5 * losses[0.0]


# -- the stage -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_known_programs_are_recovered(device, tmp_path, name):
    gen = program(GENERATORS[name])
    target = render_shader(device, gen, SIZE, SIZE)
    r = run_stage(write_png(tmp_path / f"{name}.png", target), tmp_path / "out", *CPU_PRESET)
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    m = manifest["metrics"]
    assert float(m["psnr_db"]) >= 30.0, (name, m)  # "inf" when exact
    assert m["complexity"] <= dsl.complexity(gen) + 2, (name, m)
    names = {f["name"] for f in manifest["files"]}
    assert {"program.json", "procedural.slang", "procedural.hlsl", "procedural.glsl", "render.png", "render_4x.png",
            "target.png", "difference.png", "pareto.json", "pareto.png"} <= names
    found = dsl.from_json(json.loads((tmp_path / "out" / "program.json").read_text()), require_params=True)
    assert dsl.complexity(found) == m["complexity"]
    assert psnr(render_shader(device, found, SIZE, SIZE), target) == pytest.approx(float(m["psnr_db"]), abs=1e-3)
    front = json.loads((tmp_path / "out" / "pareto.json").read_text())["front"]
    assert [p["nodes"] for p in front] == sorted(p["nodes"] for p in front)
    assert all(a["loss"] > b["loss"] for a, b in zip(front, front[1:]))


def test_too_small_and_not_rgb_images_are_refused(tmp_path):
    r = run_stage(write_png(tmp_path / "tiny.png", np.full((8, 8, 3), 0.5, np.float32)), tmp_path / "o1")
    assert r.exit_code != 0 and "tiny.png" in r.output and "at least 32x32" in r.output
    r = run_stage(write_png(tmp_path / "grey.png", np.full((32, 32, 1), 0.5, np.float32)), tmp_path / "o2")
    assert r.exit_code != 0 and "grey.png" in r.output and "RGB or RGBA" in r.output
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_malformed_proposals_are_skipped_with_a_warning(caplog):
    good = GENERATORS["checker_ramp"]
    text = json.dumps({"programs": [good, {"op": "spiral"}, {"op": "ramp", "inputs": []}]})
    with caplog.at_level(logging.WARNING):
        got = proposers.parse_proposals(text, logging.getLogger("test"))
    assert got == [dsl.from_json(good)]
    assert "program 1 skipped: root: unknown op 'spiral'" in caplog.text
    assert "program 2 skipped: root.inputs: ramp takes 1 input(s)" in caplog.text
    assert proposers.parse_proposals("not json", logging.getLogger("test")) == []
    assert "not JSON" in caplog.text


def test_external_proposer_command_programs_are_fitted(device, tmp_path, caplog, monkeypatch):
    # A bake earlier in the session (bakery.pipeline.cli) stops the "bakery" logger from
    # propagating to the root logger, where caplog listens: let it through again.
    monkeypatch.setattr(logging.getLogger("bakery"), "propagate", True)
    script = tmp_path / "propose.py"
    script.write_text(
        "import json, sys\n"
        "req = json.load(sys.stdin)\n"
        "assert req['width'] == 64 and 'checker' in req['ops']\n"
        "print(json.dumps({'programs': [{'op': 'mix'}, {'op': 'ramp', 'attrs': {'stops': 3},"
        " 'inputs': [{'op': 'checker'}]}]}))\n")
    target = render_shader(device, program(GENERATORS["checker_ramp"]), SIZE, SIZE)
    img = write_png(tmp_path / "t.png", target)
    with caplog.at_level(logging.WARNING):
        r = run_stage(img, tmp_path / "out", *SMALL, f"proposer=cmd:{sys.executable} {script}")
    assert r.exit_code == 0, r.output
    assert "proposer program 0 skipped: root.inputs: mix takes 3 input(s)" in caplog.text
    search = json.loads((tmp_path / "out" / "manifest.json").read_text())["search"]
    assert search["from_command"] == 1
    assert search["structures_fitted"] == len(proposers.LEAVES) + 1  # generation 0 plus the command's program


def test_unknown_proposer_is_a_usage_error(tmp_path):
    img = write_png(tmp_path / "t.png", np.full((32, 32, 3), 0.5, np.float32))
    r = run_stage(img, tmp_path / "out", "proposer=oracle")
    assert r.exit_code == 2 and "params.proposer" in r.output
