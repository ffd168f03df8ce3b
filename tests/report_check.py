"""The stage-report contract, checked on a real bundle by each stage's tests: the stage's
``report_section`` hook draws its verdict against the baseline, pictures, and every
metric under its readable name (issue 41)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path


def assert_section(bundle: Path, inputs: dict | None = None, *, images: int = 1, verdict: bool = True) -> str:
    from bakery.reporting import BundleView, describe_metric, flatten
    from bakery.stages import get_stage

    manifest = json.loads((Path(bundle) / "manifest.json").read_text())
    stage = get_stage(manifest["stage"]["type"])
    view = BundleView("stage", "asset", Path(bundle), manifest, inputs or {}, Path(bundle).parent,
                      stage.judge(manifest), stage.metric_docs)
    html = stage.report_section(view)
    if verdict:
        assert view.verdict is not None and "class='verdict" in html, "no verdict against the baseline"
        assert escape(view.verdict.baseline) in html
    assert html.count("<img") >= images, html[:400]
    for name, value in flatten(manifest["metrics"]).items():
        if value is not None:
            label, what = describe_metric(name, stage.metric_docs)
            assert what, f"metric {name} has no explanation in {stage.type_name}.metric_docs"
            assert escape(label) in html
    return html
