"""docs/PIPELINE.md lists what ``auto`` means for every stage that has presets, as the
code has it (issue 16, item 1): the tables there are ``Presets.markdown()``."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import bakery.stages
from bakery.stages.params import Presets

DOC = Path(__file__).resolve().parent.parent / "docs" / "PIPELINE.md"


def _stages_with_presets():
    for info in pkgutil.iter_modules(bakery.stages.__path__):
        if info.ispkg:
            module = importlib.import_module(f"bakery.stages.{info.name}.stage")
            if isinstance(getattr(module, "PRESETS", None), Presets):
                yield info.name, module.PRESETS


@pytest.mark.parametrize("name,presets", list(_stages_with_presets()), ids=lambda v: v if isinstance(v, str) else "")
def test_pipeline_doc_holds_every_stages_preset_table(name, presets):
    assert presets.markdown() in DOC.read_text(), f"docs/PIPELINE.md: {name}'s table is stale (PRESETS.markdown())"


def test_every_training_stage_has_presets():
    # discovery finds a stage only when its PRESETS is a Presets: a stage that falls back to
    # an ad-hoc table would silently drop out of the tests above
    assert {"fit", "mipmap", "neural_material", "neural_texture", "ntc", "procedural"} <= {
        name for name, _ in _stages_with_presets()}


def test_every_tier_of_every_device_class_is_there():
    for name, presets in _stages_with_presets():
        assert {d: list(t) for d, t in presets.table.items()} == {
            d: ["preview", "production", "final"] for d in ("cpu", "gpu")}, name


def test_run_stage_help_lists_quality_and_auto_params():
    from click.testing import CliRunner

    from bakery.cli import main

    for name, presets in _stages_with_presets():
        r = CliRunner().invoke(main, ["run", name, "--help"])
        assert r.exit_code == 0, r.output
        assert "quality" in r.output and "or 'auto'" in r.output, name
