"""What every registered stage owes, checked on one tiny task each (tests/stage_tasks.py):
the same seed gives the same bytes; ``auto`` resolves to the device class's preset and the
manifest records every value used; presets cover every automatic parameter and grow with
the quality tier. A new stage is tested by being registered (and given a tiny task).

``baked`` bakes each task once per session module, twice with one seed; a check of the
bundles takes it as a fixture."""

from __future__ import annotations

import math

import pytest

from bakery.stages import get_stage, known_stages
from bakery.stages.params import AUTO, QUALITIES
from tests.stage_tasks import BUDGETS, TASKS, bake


def _builtin_stages() -> list[str]:
    return [name for name in known_stages() if get_stage(name).__module__.startswith("bakery.stages.")]


@pytest.fixture(scope="module", params=TASKS, ids=[t.id for t in TASKS])
def baked(request, device, tmp_path_factory):
    return bake(request.param, tmp_path_factory.mktemp(request.param.id), device)


def _at(manifest: dict, path: tuple[str, ...]):
    for key in path:
        manifest = manifest[key]
    return manifest


def test_every_registered_stage_has_a_tiny_task_and_a_budget():
    assert sorted({t.stage for t in TASKS}) == sorted(_builtin_stages()) == sorted(BUDGETS)


@pytest.mark.parametrize("name", _builtin_stages())
def test_presets_cover_every_auto_param_and_grow_with_quality(name):
    """Each automatic parameter has a typed, in-range value in every row, and a higher tier
    never trains less: every number grows or stays, and the stage's budget grows."""
    stage = get_stage(name)
    auto = [p for p in stage.params if p.auto]
    if not auto:
        assert stage.presets is None
        return
    assert stage.presets is not None
    for dclass, tiers in stage.presets.table.items():
        assert list(tiers) == list(QUALITIES), dclass
        for quality, row in tiers.items():
            for p in auto:
                assert p.name in row, (dclass, quality, p.name)
                assert p.coerce(row[p.name]) == row[p.name] != AUTO, (dclass, quality, p.name)
        rows = [tiers[q] for q in QUALITIES]
        numbers = [n for n in rows[0] if isinstance(rows[0][n], (int, float)) and not isinstance(rows[0][n], bool)]
        for n in numbers:
            assert [r[n] for r in rows] == sorted(r[n] for r in rows), (dclass, n)
        budgets = [math.prod(r[n] for n in BUDGETS[name]) for r in rows]
        assert budgets[0] < budgets[1] < budgets[2], (dclass, budgets)


def test_same_seed_same_bytes(baked, device):
    """Same inputs, seed and device: every file of the bundle, byte for byte, on either
    backend (the CoopVec backend's gradient sums are fixed point too)."""
    a, b = baked.bundles
    names = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert "manifest.json" in names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_auto_params_resolve_for_the_device_and_are_recorded(baked, device):
    """``params`` keeps what was asked (``auto`` included); ``resolved_params`` holds every
    value used: the device class's preset row for each ``auto`` (or the stage's adaptation
    to its input), the given value for the rest; the stage's own section repeats them."""
    task, stage, m = baked.task, baked.stage, baked.manifest
    dclass = "cpu" if device.info.software else "gpu"
    auto = sorted(p.name for p in stage.params if p.auto and p.name not in task.params)
    assert {k: v for k, v in m["params"].items() if v == AUTO} == {k: AUTO for k in auto}
    rp = m["resolved_params"]
    quality = task.params.get("quality", "production")
    assert (rp["device_class"], rp["quality"], rp["auto"]) == (dclass, quality, auto)
    assert rp["values"] == dict(baked.settings.values)
    row = stage.presets.table[dclass][quality]
    for name in auto:
        assert rp["values"][name] == task.adapted.get(name, row[name]), name
    for name, value in task.params.items():  # an explicit value always wins
        assert rp["values"][name] == value, name
    for path, names in task.echo:
        section = _at(m, path)
        for name in names:
            want = dclass if name == "device_class" else rp["values"][name]
            assert section[name] == want, (path, name)
    for path, value in task.manifest.items():
        assert _at(m, path) == value, path


def test_report_section_is_the_stages_own_and_judges_it(baked, tmp_path):
    """The stage's report hook draws a non-empty section from its bundle: pictures, every
    metric under a readable name with its explanation, and the verdict against its
    baseline (every stage measures one; ntc's only with ``baseline`` or margin weighting)."""
    from tests.report_check import assert_section

    stage, m = baked.stage, baked.manifest
    assert stage.baseline and "margin_db" in stage.metric_docs
    judged = m["params"].get("baseline", True) or m["params"].get("weighting") not in (None, "uniform")
    assert ("verdict" in m) == judged and (m["metrics"].get("margin_db") is not None) == judged
    assert_section(baked.bundles[0], baked.task.inputs(tmp_path / "inputs"), verdict=judged)

