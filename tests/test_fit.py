"""Stage `fit`: the shipped examples recover their truths, clamping, determinism, and
one clear line for every kind of bad input."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.errors import BakeryError, TaskError, UsageError
from bakery.formats.images import load_image
from bakery.imaging import psnr
from bakery.pipeline.task import run_task, settings_for
from bakery.stages import StageInput, get_stage
from scripts.make_fit_assets import AMOUNT

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "fit"


def _fit(device, spec: Path, out: Path, **params) -> dict:
    stage, inputs = get_stage("fit"), [StageInput(spec.stem, {"fit": spec})]
    settings = settings_for(stage, params, inputs, device_class=device.device_class)
    return run_task(stage, inputs, settings, seed=0, device_provider=lambda: device, out_dir=out,
                    log=logging.getLogger("test"), progress=lambda *a, **k: None, where=f"fit/{spec.stem}")


@pytest.fixture()
def examples(tmp_path):
    """A private copy of assets/fit that a test may edit."""
    d = tmp_path / "fit"
    shutil.copytree(ASSETS, d)
    return d


def _edit(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))
    return path


def test_brightness_recovers_amount(device, tmp_path):
    manifest = _fit(device, ASSETS / "brightness.toml", tmp_path / "out")
    amount = json.loads((tmp_path / "out" / "params.json").read_text())["amount"]
    np.testing.assert_allclose(amount, AMOUNT, atol=1e-3)
    assert manifest["metrics"]["final_loss"] < 1e-6
    curve = json.loads((tmp_path / "out" / "loss.json").read_text())["per_step"]
    assert len(curve) == 300 and curve[-1] < 1e-3 * curve[0]
    assert manifest["verdict"]["wins"] and manifest["metrics"]["start_loss"] == pytest.approx(curve[0])
    from report_check import assert_section

    assert_section(tmp_path / "out", images=4)  # reference, render, difference, the loss curve


def test_rainbow_recovers_the_mask_past_30_db(device, tmp_path):
    out = tmp_path / "out"
    manifest = _fit(device, ASSETS / "rainbow.toml", out)
    truth = load_image(ASSETS / "rainbow_mask_truth.png")
    fitted = load_image(out / "mask.png")
    assert fitted.shape == truth.shape == (128, 128, 1)
    score = psnr(fitted, truth)
    assert score >= 30.0, score
    assert manifest["metrics"]["final_loss"] < 1e-4
    names = {f["name"] for f in manifest["files"]}
    assert {"params.json", "mask.png", "mask.dds", "render.png", "reference.png", "difference.png",
            "loss.json", "convergence.png"} <= names
    assert manifest["fit"]["textures"]["mask"]["format"] == "r8_unorm"
    assert (out / "convergence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rainbow_reference_is_what_the_shader_renders(device):
    """The example's reference comes from a numpy port of rainbow.slang (device-independent
    bytes); it must agree with the Slang function up to 8-bit rounding."""
    from scripts.make_fit_assets import render_spec

    mask = load_image(ASSETS / "rainbow_mask_truth.png")
    render = render_spec(ASSETS / "rainbow.toml", {"mask": mask})
    reference = load_image(ASSETS / "rainbow_reference.png")
    assert np.abs(render - reference).max() <= 0.5 / 255 + 1e-5


def test_clamp_holds(device, examples, tmp_path):
    spec = _edit(examples / "brightness.toml", "clamp = [-1.0, 1.0], lr = 0.01", "clamp = [-0.05, 0.1], lr = 0.01")
    _fit(device, spec, tmp_path / "out", steps=40)
    amount = np.array(json.loads((tmp_path / "out" / "params.json").read_text())["amount"], np.float32)
    lo, hi = np.float32(-0.05), np.float32(0.1)
    assert (amount >= lo).all() and (amount <= hi).all()
    # the truth (0.2, -0.133, 0.067) lies outside the range in two components: they sit on it
    assert amount[0] == hi and amount[1] == lo


def test_auto_steps_come_from_the_spec_else_the_quality_preset(device, examples, tmp_path):
    from bakery.stages.fit.stage import PRESETS

    for dclass in ("cpu", "gpu"):
        steps = [PRESETS.table[dclass][q]["steps"] for q in ("preview", "production", "final")]
        assert steps[0] < steps[1] < steps[2] and steps[1] == 300  # production: the spec's own default
    dclass = "cpu" if device.info.software else "gpu"
    spec = _edit(examples / "brightness.toml", "steps = 300", "steps = 20")
    m = _fit(device, spec, tmp_path / "spec", quality="preview")
    rp = m["resolved_params"]
    assert (rp["device_class"], rp["quality"], rp["auto"], rp["values"]["steps"]) == (dclass, "preview", ["steps"], 20)
    assert (m["fit"]["steps"], m["fit"]["steps_from"]) == (20, "spec")
    _edit(spec, "steps = 20\n", "")
    m = _fit(device, spec, tmp_path / "preset", quality="preview")
    assert m["resolved_params"]["values"]["steps"] == PRESETS.table[dclass]["preview"]["steps"]
    assert (m["fit"]["steps"], m["fit"]["steps_from"]) == (PRESETS.table[dclass]["preview"]["steps"], "preset")
    m = _fit(device, spec, tmp_path / "param", quality="preview", steps=7)
    assert (m["fit"]["steps"], m["fit"]["steps_from"], m["resolved_params"]["auto"]) == (7, "param", [])


def test_clamp_holds_after_every_step(device, examples):
    """A texture parameter whose truth leaves the range: every step's values stay inside."""
    from bakery.nn.trainer import TrainConfig, Trainer
    from bakery.stages.fit.objective import ShaderFit
    from bakery.stages.fit.signature import reflect
    from bakery.stages.fit.spec import load_spec

    spec = load_spec(_edit(examples / "rainbow.toml", "clamp = [0.0, 1.0], lr = 0.05", "clamp = [0.3, 0.6], lr = 0.2"))
    sig = reflect(device, spec)
    obj = ShaderFit(device, spec, sig, load_image(spec.reference), {}, {}, seed=0)
    tr = Trainer(device, None, obj, TrainConfig(steps=12, batch=obj.pixels))
    lo, hi = np.float32(0.3), np.float32(0.6)
    on_bounds = 0
    for _ in range(12):
        tr.train(steps=1)
        mask = obj.values()["mask"]
        assert mask.min() >= lo and mask.max() <= hi
        on_bounds = max(on_bounds, int(((mask == lo) | (mask == hi)).sum()))
    assert on_bounds > 1000  # the clamp was active, not merely unneeded


def test_scalar_param_constant_uv_l1_and_a_grayscale_reference(device, tmp_path):
    """The other binding kinds and the L1 loss: recover a scalar gain of a float function."""
    from PIL import Image

    (tmp_path / "ramp.slang").write_text(
        "[Differentiable]\nfloat ramp(no_diff float2 uv, float gain, no_diff float offset)\n"
        "{\n    return gain * uv.x + offset;\n}\n")
    u = (np.arange(64) + 0.5) / 64
    ref = np.tile(0.7 * u + 0.1, (32, 1))
    Image.fromarray(np.round(ref * 65535).astype(np.uint16)).save(tmp_path / "ramp.png")  # 16-bit gray
    (tmp_path / "ramp.toml").write_text(
        'shader = "ramp.slang"\nfunction = "ramp"\nreference = "ramp.png"\nsize = [64, 32]\n'
        '[args]\nuv = { uv = true }\ngain = { param = [], init = 0.2, lr = 0.02 }\noffset = { constant = 0.1 }\n'
        '[fit]\nsteps = 200\nloss = "l1"\noptimizer = "amsgrad"\n')
    manifest = _fit(device, tmp_path / "ramp.toml", tmp_path / "out")
    gain = json.loads((tmp_path / "out" / "params.json").read_text())["gain"]
    assert abs(gain - 0.7) < 1e-3, gain
    assert manifest["fit"]["loss"] == "l1" and manifest["metrics"]["final_loss"] < 1e-3


# -- bad input ------------------------------------------------------------------------

def _error(device, spec: Path, tmp_path: Path) -> BakeryError:
    with pytest.raises(BakeryError) as e:
        _fit(device, spec, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    return e.value


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if needle in l)


def test_compile_failure_is_the_compilers_line(device, examples, tmp_path):
    _edit(examples / "brightness.slang", "return pixel + amount;", "return pixel + amout;")
    e = _error(device, examples / "brightness.toml", tmp_path)
    assert isinstance(e, TaskError)
    line = _line_of(examples / "brightness.slang", "amout")
    msg = e.one_line()
    assert f"brightness.slang:{line}:" in msg and "amout" in msg, msg
    assert "\n" not in msg


REAL = "brighten's parameters: no_diff float3 pixel, float3 amount"


@pytest.mark.parametrize("case", ["unknown_arg", "unbound", "shape", "texture_size", "no_diff", "nothing_to_fit"])
def test_binding_errors_name_the_line_and_the_real_parameters(device, examples, tmp_path, case):
    spec = examples / "brightness.toml"
    if case == "unknown_arg":
        _edit(spec, "[fit]", "gain = 2.0\n\n[fit]")
        needle, expect = "gain = 2.0", "brighten has no argument 'gain'"
    elif case == "unbound":
        _edit(spec, "amount = { param", "# amount = { param")
        needle, expect = "[args]", "argument 'amount' is not bound"
    elif case == "shape":
        _edit(spec, "param = [3]", "param = [2]")
        needle, expect = "amount = { param", "shape [2] does not match 'float3 amount'"
    elif case == "texture_size":
        _edit(spec, "param = [3], init = 0.0", "param = [64, 64, 3], init = 0.0")
        needle, expect = "amount = { param", "does not match the output size 128x128"
    elif case == "no_diff":
        _edit(spec, 'pixel = { image = "brightness_source.png" }',
              'pixel = { param = [128, 128, 3], init = 0.5 }')
        needle, expect = "pixel =", "is no_diff"
    else:
        _edit(spec, "amount = { param = [3], init = 0.0, clamp = [-1.0, 1.0], lr = 0.01 }", "amount = [0.1, 0.0, 0.0]")
        needle, expect = "[args]", "nothing to fit"
    e = _error(device, spec, tmp_path)
    assert isinstance(e, UsageError)
    first = e.lines[0]
    assert first.startswith(f"{spec.name}:{_line_of(spec, needle)}:") or f"/{spec.name}:{_line_of(spec, needle)}:" in first, first
    assert expect in first and REAL in first, first


def test_reference_size_mismatch_is_one_line(device, examples, tmp_path):
    spec = _edit(examples / "rainbow.toml", 'reference = "rainbow_reference.png"',
                 'reference = "rainbow_reference.png"\nsize = [64, 64]')
    e = _error(device, spec, tmp_path)
    first = e.lines[0]
    assert f"rainbow.toml:{_line_of(spec, 'reference =')}: reference:" in first
    assert "is 128x128 but the output size is 64x64" in first


@pytest.mark.parametrize("case", ["unknown_key", "missing_file", "bad_loss", "bad_init"])
def test_spec_errors_before_any_device_work(examples, case):
    from bakery.stages.fit.spec import SpecError, load_spec

    spec = examples / "rainbow.toml"
    if case == "unknown_key":
        _edit(spec, "[fit]", "[fit]\nsteeps = 3")
        needle, expect = "steeps", "fit.steeps: unknown key"
    elif case == "missing_file":
        _edit(spec, 'shader = "rainbow.slang"', 'shader = "nope.slang"')
        needle, expect = "nope.slang", "shader: file not found: nope.slang"
    elif case == "bad_loss":
        _edit(spec, 'loss = "l2"', 'loss = "huber"')
        needle, expect = "huber", "fit.loss: 'huber' is not allowed"
    else:
        _edit(spec, 'init = "noise"', 'init = "zeros"')
        needle, expect = "zeros", "args.mask.init: expected a number"
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    assert f"rainbow.toml:{_line_of(spec, needle)}: {expect}" in e.value.lines[0], e.value.lines


def test_cli_run_and_its_one_line_error(device, examples, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", "fit", str(examples / "brightness.toml"), "-o", str(out),
                                  "--param", "steps=20"])
    assert r.exit_code == 0, r.output
    assert (out / "params.json").exists()
    _edit(examples / "brightness.toml", "param = [3]", "param = [4]")
    r = CliRunner().invoke(main, ["run", "fit", str(examples / "brightness.toml"), "-o", str(tmp_path / "bad")])
    assert r.exit_code == 2
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert len(lines) == 1 and "brightness.toml:" in lines[0] and "shape [4]" in lines[0], r.output


def test_pipeline_bakes_the_others_when_one_shader_fails(device, examples, tmp_path):
    """A fit whose shader does not compile fails its task only; the spec's shader is an
    input of the task (editing it rebuilds)."""
    root = tmp_path / "proj"
    shutil.copytree(examples, root / "fit")
    shutil.copy(root / "fit" / "brightness.slang", root / "fit" / "broken.slang")
    _edit(root / "fit" / "broken.slang", "return pixel + amount;", "return pixel + ;")
    shutil.copy(root / "fit" / "brightness.toml", root / "fit" / "broken.toml")
    _edit(root / "fit" / "broken.toml", 'shader = "brightness.slang"', 'shader = "broken.slang"')
    for name in ("rainbow.toml",):
        _edit(root / "fit" / name, "steps = 300", "steps = 20")
    _edit(root / "fit" / "brightness.toml", "steps = 300", "steps = 20")
    (root / "pipeline.toml").write_text('[project]\nseed = 1\n[assets.fits]\nfit = "fit/*.toml"\n'
                                        '[stages.fit]\ntype = "fit"\ninputs = ["fits"]\n')
    r = CliRunner().invoke(main, ["bake", str(root / "pipeline.toml")])
    assert r.exit_code == 1, r.output
    report = json.loads((root / "out" / "bake-report.json").read_text())
    status = {t["asset"]: t for t in report["tasks"]}
    assert status["fits/broken"]["status"] == "failed"
    assert "broken.slang:" in status["fits/broken"]["error"]
    assert status["fits/brightness"]["status"] == "built" and status["fits/rainbow"]["status"] == "built"
    # the shader is an input of its task: editing it rebuilds that task only
    _edit(root / "fit" / "rainbow.slang", "0.35 * mask", "0.36 * mask")
    CliRunner().invoke(main, ["bake", str(root / "pipeline.toml")])
    report = json.loads((root / "out" / "bake-report.json").read_text())
    status = {t["asset"]: t["status"] for t in report["tasks"]}
    assert status["fits/rainbow"] == "built" and status["fits/brightness"] == "cached"
