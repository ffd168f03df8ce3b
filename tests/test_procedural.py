"""Stage `procedural`: the DSL, its shader emission, the fitting/search, and the stage."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.formats.images import encode_png
from bakery.imaging import psnr
from bakery.stages.procedural import codegen, crosscompile, dsl, fit, proposers, texture_stats
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
    "checker_ramp": ramp({"op": "checker", "params": {"frequency": [8], "offset": [0.1, 0.2]}},
                         [0.1, 0.2, 0.3, 0.9, 0.8, 0.6]),
    "bricks": ramp({"op": "bricks", "params": {"count": [4, 8], "offset": [0, 0], "mortar": [0.012]}}, [0.8, 0.8, 0.75, 0.6, 0.2, 0.1]),
}

#: Exercises every operator once.
EVERY_OP = {"op": "add", "inputs": [
    {"op": "mix", "inputs": [
        {"op": "threshold", "params": {"level": [0.5]}, "inputs": [
            {"op": "multiply", "inputs": [
                {"op": "fbm", "attrs": {"octaves": 3, "basis": "value"},
                 "params": {"frequency": [5], "gain": [0.5], "offset": [1, 2]}},
                {"op": "worley", "params": {"frequency": [6], "jitter": [0.8], "offset": [0, 1]}}]}]},
        ramp({"op": "warp", "params": {"frequency": [3], "amplitude": [0.1], "offset": [2, 3]}, "inputs": [
            {"op": "warp_sine", "params": {"k": [0, 2], "amplitude": [0.05, 0], "phase": [0.25]}, "inputs": [
                {"op": "warp_triangle", "params": {"k": [1, 0], "amplitude": [0, 0.03], "phase": [0]}, "inputs": [
                    {"op": "add", "inputs": [
                        {"op": "stripes_saw", "params": {"k": [3, 1], "phase": [0.2]}},
                        {"op": "stripes_triangle", "params": {"k": [2, 0], "phase": [0.1]}}]}]}]}]},
             [0.2, 0.1, 0.0, 0.9, 0.5, 0.2]),
        ramp({"op": "polar", "params": {"center": [0.5, 0.5], "scale": [2]}, "inputs": [
            {"op": "add", "inputs": [
                {"op": "gradient_noise", "params": {"frequency": [4], "offset": [0, 0]}},
                {"op": "value_noise", "params": {"frequency": [8], "offset": [3, 1]}}]}]},
             [0.0, 0.3, 0.1, 0.5, 0.7, 0.2, 1.0, 1.0, 0.9], (0.2, 0.6, 0.9))]},
    {"op": "multiply", "inputs": [
        {"op": "constant", "params": {"colour": [0.2, 0.2, 0.2]}},
        ramp({"op": "add", "inputs": [
            {"op": "radial_gradient", "params": {"center": [0.3, 0.4], "scale": [1], "offset": [0]}},
            {"op": "add", "inputs": [
                {"op": "bricks", "params": {"count": [3, 6], "offset": [0, 0], "mortar": [0.02]}},
                {"op": "add", "inputs": [
                    {"op": "brick_cells", "params": {"count": [3, 6], "offset": [0, 0], "amount": [0.3]}},
                    {"op": "worley_cells", "params": {"frequency": [4], "jitter": [0.8], "offset": [0, 0],
                                                      "amount": [0.2]}}]}]}]},
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
    assert dsl.complexity(node) == len(list(node.walk())) == 28
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
@pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])
@pytest.mark.parametrize("tile", [False, True])
def test_emitted_slang_renders_what_the_search_evaluates(device, tile, interpret):
    for obj in (EVERY_OP, *GENERATORS.values()):
        node = program(obj)
        searched = fit.render_program(device, node, SIZE, SIZE, tile=tile, interpret=interpret)
        shipped = render_shader(device, node, SIZE, SIZE, tile=tile)
        assert np.isfinite(searched).all()
        np.testing.assert_allclose(shipped, searched, atol=2e-5)
    assert searched.std() > 0.05  # a real image, not a constant
    if tile:  # whole frequencies and wrapped lattices: one period on is the same image
        mix = EVERY_OP["inputs"][0]
        cells = EVERY_OP["inputs"][1]["inputs"][1]["inputs"][0]["inputs"][1]  # bricks + cell hashes
        node = program({"op": "mix", "inputs": [*mix["inputs"][:2], ramp(cells, [0.1, 0.2, 0.3, 0.9, 0.8, 0.7])]})
        assert dsl.periodic(node) and not dsl.periodic(program(EVERY_OP))
        moved = render_shader(device, node, SIZE, SIZE, tile=True, origin=(1.0, -1.0))
        np.testing.assert_allclose(moved, render_shader(device, node, SIZE, SIZE, tile=True), atol=1e-4)


#: A program of smooth ops only (no edges, no cell hashes): its derivative exists
#: everywhere, so finite differences can check the interpreter's backward pass.
SMOOTH = {"op": "mix", "inputs": [
    {"op": "multiply", "inputs": [
        {"op": "stripes_sine", "params": {"k": [2, 1], "phase": [0.1]}},
        {"op": "linear_gradient", "params": {"k": [0.3, -0.2], "offset": [0.5]}}]},
    ramp({"op": "add", "inputs": [
        {"op": "radial_gradient", "params": {"center": [0.4, 0.6], "scale": [0.3], "offset": [0.2]}},
        {"op": "warp_sine", "params": {"k": [1, 2], "amplitude": [0.04, 0.03], "phase": [0.2]}, "inputs": [
            {"op": "fbm", "attrs": {"octaves": 2, "basis": "gradient"},
             "params": {"frequency": [3], "gain": [0.5], "offset": [0.3, 0.7]}}]}]},
         [0.1, 0.2, 0.3, 0.8, 0.6, 0.4, 0.9, 0.9, 0.2], (-1.0, 0.7, 3.0)),
    {"op": "constant", "params": {"colour": [0.3, 0.5, 0.7]}}]}

#: Colours and d dot(colour, weights) / d p per pixel through either evaluator
#: (fit.evaluator_source): the interpreter's bk_gradient, or Slang's autodiff of the
#: compiled switch.
_GRADIENT_KERNEL = """
RWStructuredBuffer<float> g_p;
RWStructuredBuffer<float> g_weights;
RWStructuredBuffer<float> g_out;     // [pixels][3]
RWStructuredBuffer<float> g_grads;   // [pixels][BK_MAXP]
[shader("compute")]
[numthreads(64, 1, 1)]
void check(uint3 tid: SV_DispatchThreadID, uniform uint size)
{
    if (tid.x >= size * size)
        return;
    float p[BK_MAXP];
    for (uint i = 0; i < BK_MAXP; i++)
        p[i] = g_p[i];
    float2 fw = float2(1.0, 1.0) / float(size);
    float2 uv = (float2(float(tid.x % size), float(tid.x / size)) + 0.5) * fw;
    float3 c = bk_eval(0, uv, fw, p);
    g_out[3 * tid.x] = c.x;
    g_out[3 * tid.x + 1] = c.y;
    g_out[3 * tid.x + 2] = c.z;
    float3 w = float3(g_weights[3 * tid.x], g_weights[3 * tid.x + 1], g_weights[3 * tid.x + 2]);
#if BK_INTERPRETED
    float dp[BK_MAXP] = {};
    bk_gradient(0, uv, fw, p, w, dp);
#else
    var pair = diffPair(p);
    bwd_diff(bk_eval)(0, uv, fw, pair, w);
    float dp[BK_MAXP] = pair.d;
#endif
    for (uint i = 0; i < BK_MAXP; i++)
        g_grads[tid.x * BK_MAXP + i] = dp[i];
}
"""


def _colours_and_gradient(device, node, values: np.ndarray, weights: np.ndarray, size: int, *, tile: bool = False,
                          interpret: bool = True):
    """The weighted sum of node's colours over a size^2 image at optimiser values
    ``values``, and its gradient by them, through one evaluator (_GRADIENT_KERNEL)."""
    from bakery.nn.parameters import make_buffer
    from bakery.stages.procedural import bytecode

    structure = node.structure()
    slots = len(values)
    width = bytecode.MAX_PARAMS if interpret else max(1, dsl.param_count(structure))
    buffers = {"g_weights": make_buffer(device, weights),
               "g_out": make_buffer(device, np.zeros(size * size * 3, np.float32)),
               "g_grads": make_buffer(device, np.zeros(size * size * width, np.float32)),
               "g_p": make_buffer(device, np.pad(values, (0, width - slots)).astype(np.float32))}
    if interpret:
        code, rows, scales = bytecode.pack([structure], tile=tile)
        buffers.update({"g_code": make_buffer(device, code.reshape(-1)),
                        "g_structures": make_buffer(device, rows.reshape(-1)), "g_scales": make_buffer(device, scales)})
    kernel = device.kernel(fit.evaluator_source([structure], tile, interpret) + _GRADIENT_KERNEL, "check")
    device.submit(lambda enc: kernel.dispatch([size * size, 1, 1], vars=buffers, command_encoder=enc, size=size))
    device.wait()
    colours = buffers["g_out"].to_numpy().view(np.float32)[: size * size * 3].astype(np.float64)
    grads = buffers["g_grads"].to_numpy().view(np.float32).reshape(size * size, -1)[:, :slots]
    return float(colours @ weights), grads.astype(np.float64).sum(axis=0)


def test_the_interpreter_dispatches_every_opcode():
    """interpreter.slang's BK_EVERY_OP names each of bytecode.OPCODES once, in order: an op
    added to the bytecode and not to the dispatch would run as nothing."""
    import re

    from bakery.stages.procedural import bytecode

    source = (Path(fit.__file__).parent / "interpreter.slang").read_text()
    definition = source[source.index("#define BK_EVERY_OP(X)"):].split("\n\n", 1)[0]
    assert [int(k) for k in re.findall(r"X\((\d+)\)", definition)] == sorted(bytecode.OPCODES.values())


def test_the_interpreters_gradient_matches_finite_differences(device):
    """bk_gradient (the instructions in reverse) against central differences of the
    interpreter's own forward pass, for every slot of a smooth program: a weighted sum
    of the colours over a 16^2 image."""
    node = program(SMOOTH)
    values = dsl.flatten(node) / dsl.param_scales(node)
    weights = np.random.default_rng(0).normal(size=16 * 16 * 3).astype(np.float32)
    _, analytic = _colours_and_gradient(device, node, values, weights, 16)
    h = 1e-3
    numeric = np.array([(_colours_and_gradient(device, node, values + h * e, weights, 16)[0]
                         - _colours_and_gradient(device, node, values - h * e, weights, 16)[0]) / (2 * h)
                        for e in np.eye(len(values))])
    assert np.abs(analytic).max() > 1.0  # the weights reach the parameters
    np.testing.assert_allclose(analytic, numeric, rtol=2e-2, atol=2e-2 * np.abs(numeric).max())


@pytest.mark.parametrize("tile", [False, True])
def test_the_interpreter_and_the_compiled_form_agree_on_colours_and_gradients(device, tile):
    """Every op (edges, cell hashes, thresholds, warps included), both evaluators: the
    same colours, and the interpreter's hand-written backward pass gives what Slang's
    autodiff of the compiled straight-line code gives."""
    weights = np.random.default_rng(1).normal(size=16 * 16 * 3).astype(np.float32)
    for obj in (EVERY_OP, *GENERATORS.values()):
        node = program(obj)
        values = dsl.flatten(node) / dsl.param_scales(node)
        ran, by_hand = _colours_and_gradient(device, node, values, weights, 16, tile=tile, interpret=True)
        compiled, by_autodiff = _colours_and_gradient(device, node, values, weights, 16, tile=tile, interpret=False)
        assert ran == pytest.approx(compiled, rel=1e-5, abs=1e-4)
        assert np.abs(by_autodiff).max() > 1.0
        np.testing.assert_allclose(by_hand, by_autodiff, rtol=1e-3, atol=1e-4 * np.abs(by_autodiff).max())


def test_hard_edges_are_box_filtered_over_the_pixel(device):
    """An edge drawn at 64^2 covers each pixel as much as the 512^2 drawing does on
    average over that pixel (what an anti-aliased shader draws), not a learned blur."""
    for obj in (GENERATORS["checker_ramp"], GENERATORS["bricks"]):
        node = program(obj)
        small = render_shader(device, node, SIZE, SIZE)
        fine = render_shader(device, node, 8 * SIZE, 8 * SIZE).reshape(SIZE, 8, SIZE, 8, 3).mean(axis=(1, 3))
        assert psnr(small, fine) > 35.0
        assert np.abs(small - fine).max() < 0.2


def test_hlsl_and_glsl_are_compiled_from_the_slang_program():
    node = program(EVERY_OP)
    slang = codegen.generate(node, "slang")
    assert "float3 bakery_procedural(float2 uv, float2 fw)" in slang and "bk_warp_sine(" in slang
    assert "[Differentiable]\n" not in slang and "no_diff" not in slang
    for lang in ("hlsl", "glsl"):
        text = codegen.generate(node, lang)
        # The compiler's spelling, not ours: its names carry a suffix, its types the language's own.
        assert "bakery_procedural_0(" in text and "bk_brick_cells" in text and "bk_worley_cell_value" in text
        assert "[Differentiable]" not in text
    glsl = codegen.generate(node, "glsl")
    assert "#version 450" in glsl and "vec3 bakery_procedural_0(vec2" in glsl and "float3" not in glsl
    assert "void main()" in glsl  # GLSL's name for the entry point
    hlsl = codegen.generate(node, "hlsl")
    assert "float3 bakery_procedural_0(float2" in hlsl and f"void {codegen.BAKE_ENTRY}(" in hlsl
    with pytest.raises(crosscompile.CrossCompileError, match="undefined identifier"):
        crosscompile.compile_to("[shader(\"compute\")][numthreads(1, 1, 1)] void e() { nope(); }", "e", "glsl")


def test_one_slang_session_compiles_each_program_as_a_fresh_process_does():
    """The compiler's session is kept for the process (creating one is most of a
    request's time): a program compiled after others gives the code it gives alone."""
    script = ("import sys, json; from bakery.stages.procedural import codegen, dsl; "
              "p = dsl.from_json(json.loads(sys.argv[1]), require_params=True); "
              "print(json.dumps({l: codegen.generate(p, l) for l in ('hlsl', 'glsl')}))")
    first, second = GENERATORS["checker_ramp"], GENERATORS["bricks"]
    here = [{lang: codegen.generate(program(p), lang) for lang in ("hlsl", "glsl")} for p in (first, second)]
    alone = json.loads(subprocess.run([sys.executable, "-c", script, json.dumps(second)], capture_output=True,
                                      text=True, check=True).stdout)
    assert here[1] == alone and here[0] != here[1]


@pytest.mark.skipif(shutil.which("glslangValidator") is None, reason="needs glslangValidator (Debian glslang-tools)")
@pytest.mark.parametrize("lang", ["glsl", "hlsl"])
def test_glsl_and_hlsl_compile_with_glslang(tmp_path, lang):
    text = codegen.generate(program(EVERY_OP), lang, tile=True)
    src = tmp_path / ("p.comp" if lang == "glsl" else "p.hlsl")
    src.write_text(text)
    args = ["glslangValidator", "-V", str(src)] if lang == "glsl" else \
        ["glslangValidator", "-D", "-V", "-S", "comp", "-e", codegen.BAKE_ENTRY, str(src)]
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


#: Drawn here at 128^2, recovered at the stage's CPU preset (auto).
EXACT = {
    "two_colour_checker": (ramp({"op": "checker", "params": {"frequency": [6], "offset": [0, 0]}},
                                [0.1, 0.15, 0.2, 0.9, 0.85, 0.7]), 35.0),
    "sine_warped_stripes": (ramp({"op": "warp_sine", "params": {"k": [0, 2], "amplitude": [0.05, 0], "phase": [0.25]},
                                  "inputs": [{"op": "stripes_sine", "params": {"k": [6, 0], "phase": [0]}}]},
                                 [0.2, 0.1, 0.05, 0.95, 0.8, 0.6]), 30.0),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_drawn_programs_come_back_exactly_and_tile(device, tmp_path, name):
    obj, floor = EXACT[name]
    gen = program(obj)
    target = render_shader(device, gen, 128, 128)
    r = run_stage(write_png(tmp_path / f"{name}.png", target), tmp_path / "out")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    m = manifest["metrics"]
    assert float(m["psnr_db"]) >= floor, (name, m)
    assert m["complexity"] <= dsl.complexity(gen) + 2
    doc = json.loads((tmp_path / "out" / "program.json").read_text())
    found = dsl.from_json(doc, require_params=True)
    if name == "two_colour_checker":  # the frequency a person would write, exactly
        assert [n.param["frequency"] for n in found.walk() if n.op == "checker"] == [(6.0,)]
    # Both targets tile (whole frequencies), so the programs must: one period on, the same image.
    assert manifest["tiling"]["target_tiles"] and doc["tile"] and m["tiles"]
    here = render_shader(device, found, 128, 128, tile=True)
    for origin in ((1.0, 0.0), (0.0, 1.0)):
        assert np.abs(render_shader(device, found, 128, 128, tile=True, origin=origin) - here).max() < 1e-3
    assert "tile3x3.png" in {f["name"] for f in manifest["files"]}


#: Noise leaves and their other parameters, for the numpy twins of the shader's noise.
NOISES = (("value_noise", {}, {"frequency": [5], "offset": [3.3, -4.1]}),
          ("gradient_noise", {}, {"frequency": [5], "offset": [-2.5, 4.1]}),
          ("fbm", {"octaves": 3, "basis": "value"}, {"frequency": [4], "gain": [0.6], "offset": [1, 2]}),
          ("fbm", {"octaves": 4, "basis": "gradient"}, {"frequency": [4], "gain": [0.5], "offset": [1, 2]}),
          ("worley", {}, {"frequency": [6], "jitter": [0.9], "offset": [0.3, 0.7]}))


@pytest.mark.parametrize("tile", (False, True))
def test_numpy_noise_twins_draw_what_the_shader_draws(device, tile):
    from bakery.stages.procedural import locate
    n = 64
    v, u = np.mgrid[0:n, 0:n]
    uv = np.stack([(u + 0.5) / n, (v + 0.5) / n], axis=-1)
    for op, attrs, params in NOISES:
        node = program(ramp({"op": op, "attrs": attrs, "params": params}, [0, 0, 0, 1, 1, 1], (-8.0, 8.0)))
        shader = fit.render_program(device, node, n, n, tile=tile)[:, :, 0] * 16.0 - 8.0
        f = params["frequency"][0]
        twin = locate.field(op, uv * f + np.array(params["offset"]), node.inputs[0].attr,
                            {k: v[0] for k, v in params.items()}, float(f) if tile else 0.0)
        assert np.abs(twin - shader).max() < 1e-4, (op, attrs)


def test_noise_warps_and_rings_are_located_where_they_were_drawn(device):
    """The correlation finds a noise leaf's whole frequency and offset in the unbounded
    field, a noise warp's under sine stripes, and the centre and frequency of rings."""
    from bakery.stages.procedural import locate
    from bakery.stages.procedural.search import Hints

    def luma(obj):
        return render_shader(device, program(obj), 128, 128).mean(axis=2)

    noise = luma(ramp({"op": "value_noise", "params": {"frequency": [7], "offset": [5.25, 2.5]}},
                      [0.9, 0.8, 0.6, 0.1, 0.2, 0.3]))
    loc = locate.locate(noise, "value_noise", {}, {})
    assert loc.frequency == 7.0 and np.allclose(loc.offset, (5.25, 2.5), atol=0.05) and loc.score > 0.95
    warped = luma(ramp({"op": "warp", "params": {"frequency": [2], "amplitude": [0.12], "offset": [4, 1]}, "inputs": [
        {"op": "stripes_sine", "params": {"k": [4, 5], "phase": [0.2]}}]}, [0.1, 0.1, 0.1, 0.9, 0.8, 0.7]))
    found = locate.warped_stripes(warped, Hints(np.repeat(warped[:, :, None], 3, axis=2)).peaks[0])
    assert found.k == (4.0, 5.0) and found.frequency == 2.0
    assert np.allclose(found.offset, (4, 1), atol=0.1) and 0.06 < found.amplitude < 0.18
    rings = locate.rings(luma(ramp({"op": "polar", "params": {"center": [0.45, 0.55], "scale": [1]}, "inputs": [
        {"op": "stripes_sine", "params": {"k": [0, 6], "phase": [0]}}]}, [0.2, 0.3, 0.4, 0.9, 0.9, 0.8])))
    assert np.allclose(rings.center, (0.45, 0.55), atol=0.01) and rings.frequency == pytest.approx(6.0, abs=0.3)
    assert rings.explained > 0.9


def test_ramp_colours_are_solved_in_any_order():
    from bakery.stages.procedural import ramps
    v = np.linspace(-0.2, 1.2, 4096).reshape(64, 64)
    colours = np.array([[0.9, 0.2, 0.1], [0.1, 0.1, 0.8], [0.7, 0.9, 0.3]])
    positions = np.array([0.1, 0.6, 0.9])
    target = (ramps.weights(v.reshape(-1), positions) @ colours).reshape(64, 64, 3)
    found_pos, found_col, mse = ramps.project(v, target, np.array([0.0, 0.5, 1.0]))
    assert mse < 1e-7
    assert np.allclose(found_col, colours, atol=0.01) and np.allclose(found_pos, positions, atol=2e-3)


def test_ramp_normal_equations_from_prefix_sums_match_the_per_pixel_solve():
    """FieldSums (the position search's solver) gives what the per-pixel solve gives, for
    ordered positions, positions out of order, and positions outside the field's range."""
    from bakery.stages.procedural import ramps
    rng = np.random.default_rng(3)
    v = rng.normal(size=5000) * 2.0
    t = rng.uniform(size=(5000, 3))
    trials = np.array([[-1.0, 0.2, 2.0], [-2.0, -1.0, 0.5], [0.5, 0.2, 1.0], [-10.0, -9.0, -8.0], [30.0, 40.0, 50.0]])
    colours, mses = ramps.FieldSums(v, t).solve(trials)
    for p, c, m in zip(trials, colours, mses):
        want_c, want_m = ramps.solve_colours(v, t, p)
        assert np.allclose(c, want_c, atol=1e-8) and m == pytest.approx(want_m, rel=1e-9, abs=1e-14)


def test_field_sums_of_many_fields_solve_each_row_in_its_own_field_bit_for_bit():
    """Rows of several fields in one FieldSums.solve (one searchsorted over complex keys)
    give exactly what each field's own FieldSums gives: fields with ties, rows in and out
    of order, positions on a field value and outside the range."""
    from bakery.stages.procedural import ramps
    rng = np.random.default_rng(8)
    t = rng.uniform(size=(900, 3))
    fields = np.stack([rng.normal(size=900), np.round(rng.uniform(size=900) * 4) / 4, np.linspace(-3, 5, 900)])
    q = np.array([[-1.0, 0.2, 2.0], [0.25, 0.5, 0.75], [0.5, 0.2, 1.0], [-10.0, -9.0, -8.0], [30.0, 40.0, 50.0]])
    rows, field = np.concatenate([q, q, q]), np.repeat(np.arange(3), len(q))
    together = ramps.FieldSums(fields, t).solve(rows, field)
    for k in range(3):
        alone = ramps.FieldSums(fields[k], t).solve(q)
        assert np.array_equal(together[0][field == k], alone[0]) and np.array_equal(together[1][field == k], alone[1])


def test_ramps_searched_side_by_side_give_each_fields_own_search_bit_for_bit(monkeypatch):
    """project_many (a generation's fields in batched rounds, in chunks) returns exactly what
    each field's search alone returns: stop counts 2-5, starts in and out of order."""
    from bakery.stages.procedural import ramps
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:40, 0:48] / 40.0
    target = rng.uniform(size=(40, 48, 3))
    fields = [f for k in range(3) for f in (np.sin(xx * 9 + k) * 2, rng.normal(size=(40, 48)),
                                            np.floor(xx * (6 + k)) % 2 + 0.01 * yy, xx * 3 - k)]
    starts = [np.sort(rng.uniform(-1.5, 1.5, 2 + k % 4)) for k in range(len(fields))]
    starts[1], starts[6] = starts[1][::-1].copy(), np.array([0.3, 0.3, 0.9])
    alone = [ramps.project_many([v], target, [p]) for v, p in zip(fields, starts)]
    monkeypatch.setattr(ramps, "SUMS_BYTES", 5 * 40 * 48 * ramps.FIELD_SUMS_BYTES_PER_PIXEL)  # chunks of 5
    together = ramps.project_many(fields, target, starts)
    for (a,), b in zip(alone, together):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert min(m for _, _, m in together) < min(np.var(target.reshape(-1, 3), axis=0).sum() / 3, 1.0)


@pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])
def test_a_fit_is_scored_on_the_device_as_its_render_would_be_on_the_host(device, interpret):
    """score_render's pixel MSE, texture loss and mean colour equal those of each render
    read back (texture_stats on the host), for several jobs of a non-square image whose
    pixel count is no multiple of a wave; a render past MAX_SCORED_COLOUR scores infinite."""
    width, height = 50, 37  # 1850 pixels: 28.9 waves
    target = render_shader(device, program(GENERATORS["bricks"]), width, height)[:, :, :3]
    stats = texture_stats.statistics(target)
    programs = [program(GENERATORS[n]) for n in ("checker_ramp", "bricks", "striped_gradient")] + [program(EVERY_OP)]
    structures = [p.structure() for p in programs]
    jobs = [(s, dsl.flatten(p) * 0.9) for s, p in enumerate(programs)]
    blinding = jobs[0][1].copy()
    blinding[2:8] *= 100.0  # checker_ramp's two ramp colours, far past any target's
    jobs.append((0, blinding))
    cfg = fit.FitConfig(steps=0, batch=width * height, texture_weight=1.0, interpret=interpret)
    scored = fit.fit_jobs(device, target, stats, structures, jobs, cfg)
    renders = fit.render_jobs(device, structures, jobs, width, height, texture=True, interpret=interpret)
    for r, render in zip(scored[:-1], renders):
        assert r.pixel_mse == pytest.approx(float(np.mean((render - target) ** 2)), rel=1e-4)
        assert r.texture_loss == pytest.approx(texture_stats.texture_loss(render, stats), rel=1e-3)
        np.testing.assert_allclose(r.mean_colour, render.reshape(-1, 3).astype(np.float64).mean(axis=0), atol=1e-6)
    assert len({r.texture_loss for r in scored[:-1]}) == len(programs) and scored[1].pixel_mse > 1e-6
    assert scored[-1].pixel_mse == np.inf and scored[-1].texture_loss == np.inf
    # An HDR target moves the bound with it: a render 20x as bright is a candidate there.
    bright = jobs[0][1].copy()
    bright[2:8] *= 20.0
    hdr_target = target * 20.0
    (hdr,) = fit.fit_jobs(device, hdr_target, texture_stats.statistics(hdr_target), structures, [(0, bright)], cfg)
    (render,) = fit.render_jobs(device, structures, [(0, bright)], width, height, texture=True, interpret=interpret)
    assert hdr.pixel_mse == pytest.approx(float(np.mean((render - hdr_target) ** 2)), rel=1e-4)


def test_a_batch_too_large_for_the_statistics_range_weighs_its_samples_down(device, monkeypatch):
    """Where a batch's texture sums could pass the fixed point's range, stats_step weighs
    each sample by a power of two below 1 and train_step undoes it: the fit equals the one
    with every sample weighing 1 (this batch stays in range either way)."""
    target = render_shader(device, program(GENERATORS["bricks"]), 256, 256)[:, :, :3]
    stats = texture_stats.statistics(target)
    node = program(GENERATORS["checker_ramp"])
    jobs = [(0, dsl.flatten(node) * 0.9)]
    cfg = fit.FitConfig(steps=3, batch=256 * 256, texture_weight=5.0)
    assert fit.BatchObjective(device, target, [node.structure()], jobs, cfg).stats_weight == 0.25
    (weighed,) = fit.fit_jobs(device, target, stats, [node.structure()], jobs, cfg)
    build = fit.BatchObjective.__init__

    def unweighed(self, *args, **kwargs):
        build(self, *args, **kwargs)
        self.stats_weight = 1.0

    monkeypatch.setattr(fit.BatchObjective, "__init__", unweighed)
    (plain,) = fit.fit_jobs(device, target, stats, [node.structure()], jobs, cfg)
    assert not np.array_equal(weighed.params, jobs[0][1])
    np.testing.assert_allclose(weighed.params, plain.params, rtol=1e-5, atol=1e-6)


def test_the_interpreter_fits_the_same_with_features_stored_or_evaluated_again(device, monkeypatch):
    """train_step reads the features stats_step stored for its samples, or where a batch's
    would pass FEATURE_STORE_BYTES evaluates them again: the same fit either way."""
    target = render_shader(device, program(GENERATORS["bricks"]), 32, 32)[:, :, :3]
    stats = texture_stats.statistics(target)
    node = program(GENERATORS["striped_gradient"])
    jobs = [(0, dsl.flatten(node) * 0.9)]
    cfg = fit.FitConfig(steps=4, batch=512, texture_weight=5.0, interpret=True)
    (stored,) = fit.fit_jobs(device, target, stats, [node.structure()], jobs, cfg)
    monkeypatch.setattr(fit, "FEATURE_STORE_BYTES", 0)
    assert not fit.BatchObjective(device, target, [node.structure()], jobs, cfg).features_stored
    (again,) = fit.fit_jobs(device, target, stats, [node.structure()], jobs, cfg)
    assert not np.array_equal(stored.params, jobs[0][1])
    np.testing.assert_allclose(stored.params, again.params, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("interpret", [False, True], ids=["compiled", "interpreted"])
def test_batching_jobs_together_changes_no_job(device, interpret):
    """Each job samples by its own index and reads its own structure (instructions or
    compiled case), so fitting three structures in one batch gives exactly what fitting
    each alone gives; and both fitting forms fit the same."""
    target = render_shader(device, program(GENERATORS["checker_ramp"]), 32, 32)
    stats = texture_stats.statistics(target)
    names = ("checker_ramp", "bricks", "striped_gradient")
    structures = [program(GENERATORS[n]).structure() for n in names]
    jobs = [(s, dsl.flatten(program(GENERATORS[n]))) for s, n in enumerate(names)]
    cfg = fit.FitConfig(steps=4, batch=512, texture_weight=1.0, interpret=interpret)
    together = fit.fit_jobs(device, target, stats, structures, jobs, cfg)
    for (s, values), a in zip(jobs, together):
        (b,) = fit.fit_jobs(device, target, stats, [structures[s]], [(0, values)], cfg)
        assert a.structure == s and np.array_equal(a.params, b.params)
        assert (a.pixel_mse, a.texture_loss) == (b.pixel_mse, b.texture_loss)
        assert np.array_equal(a.mean_colour, b.mean_colour)
    other = fit.fit_jobs(device, target, stats, structures, jobs, replace(cfg, interpret=not interpret))
    for a, b in zip(together, other):
        np.testing.assert_allclose(a.params, b.params, rtol=1e-4, atol=1e-5)


def test_a_pipeline_the_driver_cannot_build_is_one_line_naming_the_kernel(device):
    """A driver's failure to make the kernel (seen as VK_ERROR_UNKNOWN on a GPU) is one
    TaskError line naming the kernel, not a traceback."""
    import copy

    from bakery.errors import TaskError

    class Refusing:
        def __init__(self, spy):
            self._spy = spy

        def __getattr__(self, name):
            return getattr(self._spy, name)

        def create_compute_kernel(self, program):
            raise RuntimeError("createComputePipeline failed with error: -2147467259 (SLANG_FAIL) RHI messages: "
                               "driver: createPipelineFunc call failed\n  result: -13 (VK_ERROR_UNKNOWN)\n")

    refusing = copy.copy(device)
    refusing.spy, refusing._programs = Refusing(device.spy), {}
    refusing.kernel_cache = type(device.kernel_cache)()
    source = fit.fit_source([program(GENERATORS["checker_ramp"]).structure()], False, False, interpret=False)
    with pytest.raises(TaskError) as e:
        refusing.kernel(source, "render")
    assert str(e.value) == (f"compiling kernel 'render' for {device.info.adapter} failed: the driver returned "
                            "VK_ERROR_UNKNOWN creating its pipeline")
    assert refusing.kernel_cache.kernels == 0 and refusing.kernel_cache.compile_s > 0.0


@pytest.mark.slow
def test_a_noise_target_is_recovered(device, tmp_path):
    """Thresholded value noise (spots) comes back with its lattice where it was drawn."""
    obj = ramp({"op": "threshold", "params": {"level": [0.55]}, "inputs": [
        {"op": "value_noise", "params": {"frequency": [8], "offset": [2, 3]}}]}, [0.8, 0.6, 0.3, 0.2, 0.1, 0.05])
    target = render_shader(device, program(obj), 64, 64)
    r = run_stage(write_png(tmp_path / "spots.png", target), tmp_path / "out", *SMALL, "baseline_steps=50")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())["metrics"]
    assert float(m["psnr_db"]) >= 35.0 and m["complexity"] <= 3 + 2, m


def test_seams_decide_whether_a_target_tiles():
    from bakery.stages.procedural.search import tiling
    v, u = np.mgrid[0:64, 0:64] / 64.0
    gradient = np.repeat(u[:, :, None], 3, axis=2)
    stripes = np.repeat((0.5 + 0.5 * np.sin(2 * np.pi * (3 * u + 2 * v)))[:, :, None], 3, axis=2)
    edge_on_border = np.repeat(((u < 0.5) ^ (v < 0.5)).astype(float)[:, :, None], 3, axis=2)
    assert not tiling(gradient)[0]
    assert tiling(stripes)[0] and tiling(edge_on_border)[0]


def test_too_small_and_not_rgb_images_are_refused(tmp_path):
    r = run_stage(write_png(tmp_path / "tiny.png", np.full((8, 8, 3), 0.5, np.float32)), tmp_path / "o1")
    assert r.exit_code != 0 and "tiny.png" in r.output and "at least 32x32" in r.output
    r = run_stage(write_png(tmp_path / "grey.png", np.full((32, 32, 1), 0.5, np.float32)), tmp_path / "o2")
    assert r.exit_code != 0 and "grey.png" in r.output and "RGB or RGBA" in r.output
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_malformed_proposals_are_skipped_with_a_warning(caplog):
    good = GENERATORS["checker_ramp"]
    deep = {"op": "fbm"}  # thresholds of thresholds repeat their input: 3^5 copies of the fbm
    for _ in range(5):
        deep = {"op": "threshold", "inputs": [deep]}
    text = json.dumps({"programs": [good, {"op": "spiral"}, {"op": "ramp", "inputs": []}, ramp(deep, [0] * 6)]})
    with caplog.at_level(logging.WARNING):
        got = proposers.parse_proposals(text, logging.getLogger("test"))
    assert got == [dsl.from_json(good)]
    assert "program 1 skipped: root: unknown op 'spiral'" in caplog.text
    assert "program 2 skipped: root.inputs: ramp takes 1 input(s)" in caplog.text
    assert "program 3 skipped: root: more than 96 instructions" in caplog.text
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
        r = run_stage(img, tmp_path / "out", *SMALL, "tile=no", f"proposer=cmd:{sys.executable} {script}")
    assert r.exit_code == 0, r.output
    assert "proposer program 0 skipped: root.inputs: mix takes 3 input(s)" in caplog.text
    search = json.loads((tmp_path / "out" / "manifest.json").read_text())["search"]
    assert search["from_command"] == 1
    assert search["structures_fitted"] == len(proposers.LEAVES) + 1  # generation 0 plus the command's program


def test_unknown_proposer_is_a_usage_error(tmp_path):
    img = write_png(tmp_path / "t.png", np.full((32, 32, 3), 0.5, np.float32))
    r = run_stage(img, tmp_path / "out", "proposer=oracle")
    assert r.exit_code == 2 and "params.proposer" in r.output


# -- the neural-texture baseline of equal bytes ------------------------------------------------
def test_neural_texture_baseline_fits_the_bytes_and_is_deterministic(device):
    from bakery.nn.encodings import FrequencyEncoding
    from bakery.nn.network import NetworkSpec
    from bakery.stages.procedural.neural_baseline import network_for_bytes, neural_texture_of_equal_bytes

    for budget in (60, 300, 800, 2000):
        octaves, width, layers = network_for_bytes(budget)
        assert 2 * NetworkSpec(FrequencyEncoding(2, octaves), (width,) * layers, 3, "relu").param_count <= budget
    y, x = np.mgrid[0:32, 0:32] / 32.0
    image = np.stack([0.5 + 0.4 * np.sin(6 * x), 0.3 + 0.2 * y, 0.5 + 0 * x], -1).astype(np.float32)
    a, b = (neural_texture_of_equal_bytes(device, image, 400, steps=30, batch=512, seed=3) for _ in range(2))
    assert a["weights_bytes"] <= 400 and a["decoded"].shape == image.shape
    assert np.array_equal(a["decoded"], b["decoded"]) and a["texture_loss"] == b["texture_loss"]
    assert a["psnr_db"] == pytest.approx(psnr(a["decoded"], image), abs=1e-3)


def test_a_loss_to_either_baseline_is_the_verdict_and_the_other_is_named():
    from bakery.stages.procedural.stage import _against_baselines

    bc7 = {"width": 8, "height": 8, "bytes": 64, "psnr": 20.0}
    nt = {"weights_bytes": 60, "steps": 300, "texture_loss": 1e-3}
    beats_both = _against_baselines(25.0, 1e-4, bc7, nt, "CPU budget")
    assert beats_both.wins and len(beats_both.parts) == 2 and beats_both.margin_db == pytest.approx(5.0)
    loses_to_nt = _against_baselines(25.0, 1e-2, bc7, nt, "CPU budget")
    assert not loses_to_nt.wins and loses_to_nt.baseline.startswith("neural texture of equal bytes")
    assert loses_to_nt.margin_db == pytest.approx(-10.0) and "also" not in loses_to_nt.reason
    loses_to_both = _against_baselines(15.0, 1e-2, bc7, nt, "CPU budget")
    assert loses_to_both.baseline.startswith("neural texture") and loses_to_both.margin_db == pytest.approx(-10.0)
    assert "also under the BC7 at equal bytes (8x8, 64 B) (-5.00 dB)" in loses_to_both.reason
    assert loses_to_both.reason.endswith("CPU budget")


def test_stage_reports_the_neural_texture_of_equal_bytes(device, tmp_path):
    # a handler on the "bakery" logger itself: an in-process CLI run earlier in the session
    # stops that logger propagating to the root, where caplog listens
    messages: list[str] = []
    catch = logging.Handler(logging.INFO)
    catch.emit = lambda record: messages.append(record.getMessage())
    bakery_log = logging.getLogger("bakery")
    old_level = bakery_log.level
    bakery_log.addHandler(catch)
    bakery_log.setLevel(logging.INFO)
    try:
        _stage_reports_the_neural_texture_of_equal_bytes(tmp_path, messages)
    finally:
        bakery_log.removeHandler(catch)
        bakery_log.setLevel(old_level)


def _stage_reports_the_neural_texture_of_equal_bytes(tmp_path, messages):
    y, x = np.mgrid[0:48, 0:48] / 48.0
    target = np.stack([0.5 + 0.4 * np.sin(12 * x), 0.3 + 0.2 * y, 0.5 + 0 * x], -1).astype(np.float32)
    r = run_stage(write_png(tmp_path / "t.png", target), tmp_path / "out", "generations=1", "population=2",
                  "beam=1", "restarts=1", "steps=20", "fit_size=48", "refine_steps=0", "baseline_steps=30")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    nt, metrics, verdict = m["neural_texture"], m["metrics"], m["verdict"]
    assert 0 < nt["weights_bytes"] <= metrics["program_bytes"] and nt["steps"] == 30
    assert metrics["nt_texture_loss"] == nt["texture_loss"] and metrics["nt_psnr_db"] == nt["psnr_db"]
    assert [p["name"].split(" ")[0] for p in verdict["parts"]] == ["BC7", "neural"]
    assert metrics["margin_db"] == min(p["margin_db"] for p in verdict["parts"])
    assert "neural_texture.png" in {f["name"] for f in m["files"]}
    from report_check import assert_section

    assert "a neural texture of equal bytes" in assert_section(tmp_path / "out", images=3)
    # Where the task's seconds went, for bench/procedural.py: a log line, not the bundle.
    from bakery.stages.procedural.stage import SECONDS_LOG_PREFIX

    (line,) = [m for m in messages if m.startswith(SECONDS_LOG_PREFIX)]
    seconds = json.loads(line[len(SECONDS_LOG_PREFIX):])
    for part in ("search", "outputs", "baseline"):
        wall = seconds[f"{part}_s"]
        split = seconds[f"{part}_compile_s"] + seconds[f"{part}_device_wait_s"] + seconds[f"{part}_host_s"]
        assert wall > 0 and split == pytest.approx(wall, abs=0.01)
    assert seconds["search_kernels"] >= 0 and seconds["search_device_wait_s"] > 0
    assert "search_compile_s" not in (tmp_path / "out" / "manifest.json").read_text()


def test_a_washed_out_likeness_of_a_stochastic_target_gets_its_contrast_back(device):
    """Far from a copy (the noise shifted), the winner's ramp colours spread about their
    mean where the texture loss falls within a tie of the image loss; a copy is left alone."""
    from bakery.stages.procedural.search import STOCHASTIC_TIE, Candidate, Search, SearchConfig

    colours = np.array([0.1, 0.05, 0.0, 0.9, 0.7, 0.4])
    target_node = program(ramp({"op": "fbm", "attrs": {"octaves": 4, "basis": "gradient"},
                                "params": {"frequency": [6], "gain": [0.6], "offset": [0, 0]}}, list(colours)))
    target = fit.render_program(device, target_node, SIZE, SIZE)
    search = Search(device, target, SearchConfig(fit=fit.FitConfig(texture_weight=5.0)),
                    proposers.BuiltinProposer())

    def candidate(values):
        node = dsl.with_params(target_node.structure(), values)
        return Candidate(node, 0.0, 0.0, 0.0, 0.0, dsl.complexity(node), dsl.instructions(node), 0, "test")

    def losses(values):
        (r,) = fit.fit_jobs(device, search.detail, search.detail_stats, [target_node.structure()], [(0, values)],
                            fit.FitConfig(steps=0, texture_weight=5.0))
        return r.pixel_mse + 5.0 * r.texture_loss, r.texture_loss

    washed = dsl.flatten(target_node)
    washed[-2:] += (0.1, 0.1)  # the noise a little off: about 29 dB, where the pixel term
    mean = colours.reshape(2, 3).mean(axis=0)  # is lowest with the colours drawn in
    washed[2:8] = (mean + 0.8 * (colours.reshape(2, 3) - mean)).reshape(-1)
    before = losses(washed)
    after = search.contrast(candidate(washed))
    now = losses(dsl.flatten(after.program))
    assert now[1] < 0.8 * before[1]
    assert now[0] <= before[0] * (1 + STOCHASTIC_TIE) + 1e-9
    copy = candidate(dsl.flatten(target_node))
    assert search.contrast(copy) is copy


def test_the_search_stops_once_a_copy_outlasts_a_generation_and_a_likeness_uses_them_all(device, tmp_path):
    """A target a program drew is matched within a generation or two; once a generation
    finds nothing better the search stops. A photograph-like target (noise no program
    matches pixel for pixel) never becomes a copy and gets every generation, as does a
    search whose proposer command is asked each generation."""
    short = [p for p in SMALL if not p.startswith("generations=")] + ["generations=4", "tile=no"]
    drawn = render_shader(device, program(GENERATORS["bricks"]), SIZE, SIZE)
    noise = np.random.default_rng(3).random((SIZE, SIZE, 3)).astype(np.float32)
    script = tmp_path / "propose.py"
    script.write_text("import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'programs': []}))\n")
    runs = {}
    for name, image, extra in (("drawn", drawn, ()), ("noise", noise, ()),
                               ("asked", drawn, (f"proposer=cmd:{sys.executable} {script}",))):
        r = run_stage(write_png(tmp_path / f"{name}.png", image), tmp_path / name, *short, *extra)
        assert r.exit_code == 0, r.output
        runs[name] = json.loads((tmp_path / name / "manifest.json").read_text())
    assert float(runs["drawn"]["metrics"]["psnr_db"]) >= 35.0
    assert runs["drawn"]["search"]["generations_run"] < 4
    assert runs["noise"]["search"]["generations_run"] == 4
    assert runs["asked"]["search"]["generations_run"] == 4
