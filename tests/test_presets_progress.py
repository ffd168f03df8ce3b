"""Device-aware ``auto`` params and live training progress (issue 16, items 1 and 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.errors import UsageError
from bakery.formats.images import encode_png
from bakery.progress import TrainingProgress, describe
from bakery.stages.params import AUTO, QUALITY, Param, Presets, resolve_params, resolved_record
from tests.images import photo_like

SCHEMA = (QUALITY, Param("steps", int, AUTO, min=1), Param("batch", int, AUTO, min=64), Param("lr", float, 0.1))
PRESETS = Presets({"cpu": {q: {"steps": 10 * i, "batch": 4096} for i, q in enumerate(("preview", "production", "final"), 1)},
                   "gpu": {q: {"steps": 1000 * i, "batch": 65536} for i, q in enumerate(("preview", "production", "final"), 1)}},
                  fit=lambda p, texels: dict(p, batch=min(p["batch"], texels)))


def test_auto_params_resolve_per_device_class_quality_and_size():
    given = resolve_params(SCHEMA, {"quality": "final", "batch": "auto"})
    assert given == {"quality": "final", "steps": AUTO, "batch": AUTO, "lr": 0.1}
    cpu = PRESETS.resolve(given, device_class="cpu", size=1 << 20)
    gpu = PRESETS.resolve(given, device_class="gpu", size=1 << 20)
    assert (cpu["steps"], cpu["batch"], gpu["steps"], gpu["batch"]) == (30, 4096, 3000, 65536)
    assert PRESETS.resolve(given, device_class="gpu", size=1024)["batch"] == 1024  # no batch beyond the image
    explicit = PRESETS.resolve(resolve_params(SCHEMA, {"steps": 7}), device_class="gpu", size=10)
    assert explicit["steps"] == 7 and explicit["batch"] == 10
    rec = resolved_record(given, cpu, device_class="cpu")
    assert rec["auto"] == ["batch", "steps"] and rec["values"]["steps"] == 30 and rec["quality"] == "final"


def test_auto_only_where_the_param_defaults_to_it():
    with pytest.raises(UsageError, match="lr"):
        resolve_params(SCHEMA, {"lr": "auto"})
    with pytest.raises(UsageError, match="quality"):
        resolve_params(SCHEMA, {"quality": "best"})
    assert "or 'auto'" in SCHEMA[1].describe()


def test_training_progress_reports_quality_rate_eta_and_a_step_based_curve():
    now = [0.0]
    reports, probes = [], []

    def probe(done):
        probes.append(done)
        return {"loss": 1.0 / done, "psnr_db": float(done)}

    live = TrainingProgress(lambda done, total=None, **info: reports.append((done, total, info)), 100,
                            probe=probe, curve_every=25, interval_s=1e9, clock=lambda: now[0])
    for _ in range(10):
        now[0] += 2.0
        live.update(10)
    assert [p["step"] for p in live.curve] == [30, 50, 80, 100]  # every 25 steps, by step count only
    done, total, info = reports[-1]
    assert (done, total) == (100, 100) and info["eta"] == 0 and info["steps_s"] == pytest.approx(5.0)
    assert reports[3][2]["eta"] == pytest.approx(12.0) and reports[3][2]["psnr_db"] == 30.0
    assert "eta=0:12" in describe(40, 100, reports[3][2]) and "psnr_db=30" in describe(40, 100, reports[3][2])


@pytest.fixture()
def image(tmp_path):
    path = tmp_path / "photo.png"
    path.write_bytes(encode_png(photo_like(64, seed=2)))
    return path


def test_neural_texture_run_prints_a_row_and_trains_the_values_recorded(device, image, tmp_path):
    """The network and the curve are the ``resolved_params`` the manifest records (what
    ``auto`` resolves to: tests/test_stage_contract.py)."""
    out = tmp_path / "nt"
    r = CliRunner().invoke(main, ["run", "neural_texture", str(image), "-o", str(out), "--param", "quality=preview"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "psnr_db" in r.output and "{" not in r.output  # an aligned row, not a dict
    m = json.loads((out / "manifest.json").read_text())
    expected = m["resolved_params"]["values"]
    assert m["params"]["steps"] == "auto" and expected["steps"] != "auto"
    assert [l["out"] for l in m["networks"]["decoder"]["layers"]][:-1] == [expected["width"]] * expected["layers"]
    curve = json.loads((out / "convergence.json").read_text())["points"]
    steps = [p["step"] for p in curve]
    assert steps == sorted(set(steps)) and steps[-1] == expected["steps"]
    assert curve[-1]["psnr_db"] == pytest.approx(m["metrics"]["psnr_db"], abs=1e-3)
    assert curve[-1]["psnr_db"] > curve[0]["psnr_db"]  # it learned while we watched


def test_run_stage_help_lists_its_parameters():
    r = CliRunner().invoke(main, ["run", "neural_texture", "--help"])
    assert r.exit_code == 0
    assert "Parameters of neural_texture" in r.output and "quality" in r.output and "or 'auto'" in r.output
    r = CliRunner().invoke(main, ["run", "--help"])
    assert r.exit_code == 0 and "neural_texture" in r.output


def test_probes_for_display_take_a_bounded_share_of_the_training():
    """A probe that costs seconds (a whole 4096^2 set decoded) runs rarely: display probes
    stay near PROBE_SHARE of the time, and the last step's is skipped once they used it;
    a cheap probe still shows the last step's quality."""
    from bakery.progress import PROBE_SHARE

    def run(cost: float, steps: int = 100) -> tuple[list, list]:
        now, probes, reports = [0.0], [], []

        def probe(done):
            probes.append(done)
            now[0] += cost
            return {"psnr_db": float(done)}

        live = TrainingProgress(lambda done, total=None, **info: reports.append((done, info)), steps, probe=probe,
                                interval_s=1.0, clock=lambda: now[0])
        for _ in range(steps):
            now[0] += 1.0   # a second of training per update
            live.update(1)
        return probes, reports

    probes, reports = run(cost=5.0)
    assert 1 <= len(probes) <= 3 and len(probes) * 5.0 <= 1.5 * PROBE_SHARE * (100 + 5.0 * len(probes))
    assert probes[-1] < 100   # no final probe: probing had used its share
    probes, reports = run(cost=0.001)
    assert len(probes) >= 50 and probes[-1] == 100 and reports[-1][1]["psnr_db"] == 100.0
