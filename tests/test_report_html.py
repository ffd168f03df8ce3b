"""What a bake shows: quality gates, the metrics table, --json and out/report.html in a
real (headless) browser (issue 16, items 3 and 4)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from pipeline_helpers import BASIC_TOML, make_project

from bakery.errors import UsageError
from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.config import load_pipeline
from bakery.reporting import convergence_series, image_pairs
from bakery.stages.ntc.report import rd_points
from bakery.pipeline.report import BakeReport, TaskOutcome

def gated(bound: str) -> str:
    return BASIC_TOML.replace('params = { radius = 1 }', f'params = {{ radius = 1 }}\nrequire = {{ mean = {bound} }}')


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, images=("a", "b"))
    return tmp_path


def bake(*args, code=0):
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", *args])
    assert r.exit_code == code, r.output
    return r


def test_a_task_below_its_gate_fails_with_the_reason_exit_1(project):
    (project / "pipeline.toml").write_text(gated("0.99"))
    rep = json.loads(bake("--json", code=1).stdout)
    blur = [t for t in rep["tasks"] if t["stage"] == "blur"]
    assert blur and all(t["status"] == "failed" for t in blur)
    for t in blur:
        assert f"mean {t['metrics']['mean']:.4g} is below the required 0.99 (pipeline.toml:15)" in t["error"]
    assert (project / "out/blur/photos/a/blurred.png").is_file()  # published, to be looked at
    (project / "pipeline.toml").write_text(gated("0.01"))
    r = bake()  # the gate is not part of the cache key: re-checked without rebuilding
    assert "0 built, 4 cached, 0 failed" in r.output


@pytest.mark.parametrize("require, message", [("30", "expected a table"), ("{ psnr_db = 'high' }", "expected a number"),
                                              ("{ psnr_db = { least = 3 } }", "expected a number")])
def test_bad_gates_are_config_errors_with_file_and_line(project, require, message):
    (project / "pipeline.toml").write_text(BASIC_TOML.replace('params = { radius = 1 }',
                                                              f'params = {{ radius = 1 }}\nrequire = {require}'))
    with pytest.raises(UsageError) as e:
        load_pipeline(project / "pipeline.toml")
    assert message in str(e.value.lines) and "pipeline.toml:15" in e.value.lines[0]


def test_gate_direction_follows_the_metric():
    from bakery.pipeline.gates import parse_require

    gates = parse_require({"psnr_db.normal": 30, "final_loss": 0.01, "bpp": {"min": 1, "max": 4}}, "r",
                          lambda k, m: pytest.fail(m), lambda k: "p:1")
    ok = {"psnr_db": {"normal": 31.0}, "final_loss": 0.001, "bpp": 2.0}
    assert [g.failure(ok) for g in gates] == [None, None, None]
    bad = {"psnr_db": {"normal": 29.0}, "final_loss": 0.1, "bpp": 8.0}
    assert ["below" in g.failure(bad) or "above" in g.failure(bad) for g in gates] == [True] * 3


def test_metrics_print_as_an_aligned_table_not_a_dict():
    rep = BakeReport("p.toml", "out", seconds=1.0, tasks=[
        TaskOutcome("compress", "m/a", "built", metrics={"bpp": 8.0, "psnr_db": {"albedo": 31.25, "normal": 19.5}}),
        TaskOutcome("compress", "m/bb", "cached", metrics={"bpp": 4.0, "psnr_db": {"albedo": 28.0, "normal": 17.0}})])
    text = rep.table()
    assert "{" not in text
    lines = text.splitlines()
    head = next(l for l in lines if l.startswith("compress") and "psnr_db.albedo" in l)
    rows = [l for l in lines if l.startswith("m/")]
    assert len(rows) == 2 and len({len(r) for r in rows} | {len(head)}) == 1  # every row as wide as the header
    assert head.index("psnr_db.normal") + len("psnr_db.normal") == rows[0].index("19.5") + len("19.5")


def test_report_html_shows_each_task(project):
    bake()
    page = (project / "out" / "report.html").read_text()
    for asset in ("photos/a", "photos/b"):
        assert f"blur/{asset}" in page and f"summary/{asset}" in page
    assert page.count("<section class='task'") == 4


def test_built_tasks_sections_are_drawn_beside_the_bake_and_equal_the_pages_own(project, monkeypatch):
    """A section at 2048² decodes and thumbnails a bundle's images: each built task's is
    drawn on a side thread as the task ends (bakery.pipeline.html_report.SectionsAhead),
    once, and the page written at the end uses it as it would its own drawing."""
    import threading

    from bakery.pipeline import html_report

    drawn = []
    real = html_report._bundle_body
    monkeypatch.setattr(html_report, "_bundle_body", lambda o, *a: (
        drawn.append((f"{o.stage}/{o.asset}", threading.current_thread() is threading.main_thread())), real(o, *a))[1])
    bake()
    # each built task's section drawn once, off the bake's thread (the page drew none again)
    assert sorted(drawn) == sorted((f"{stage}/photos/{a}", False) for a in "ab" for stage in ("blur", "summary"))
    ahead = {p.name: p.read_bytes() for p in (project / "cache" / "report").iterdir()}
    page = (project / "out" / "report.html").read_text()

    shutil.rmtree(project / "cache" / "report")
    drawn.clear()
    bake()   # cached: nothing built, every section drawn by the page on the bake's thread
    assert len(drawn) == 4 and all(on_main for _, on_main in drawn)
    assert {p.name: p.read_bytes() for p in (project / "cache" / "report").iterdir()} == ahead
    assert page.count("<section class='task'") == 4


def test_report_html_pairs_images_and_reads_curves(tmp_path):
    from bakery.formats.images import encode_png
    from bakery.pipeline.html_report import render

    b = tmp_path / "b"
    b.mkdir()
    img = np.random.default_rng(0).random((8, 8, 3)).astype(np.float32)
    (b / "reference.png").write_bytes(encode_png(img))
    (b / "preview.png").write_bytes(encode_png(np.clip(img + 0.05, 0, 1)))
    (b / "convergence.json").write_text(json.dumps({"points": [{"step": 8, "mse": 0.1, "psnr_db": 10.0},
                                                               {"step": 16, "mse": 0.01, "psnr_db": 20.0}]}))
    files = [{"name": "reference.png", "role": "reference"}, {"name": "preview.png", "role": "preview"},
             {"name": "convergence.json", "role": "loss_curve"}]
    manifest = {"files": files, "metrics": {"psnr_db": 26.0}}
    (b / "manifest.json").write_text(json.dumps(manifest))
    assert [p[1].name for p in image_pairs(b, manifest, {})] == ["reference.png"]
    steps, series = convergence_series(json.loads((b / "convergence.json").read_text()))
    assert list(steps) == [8, 16] and set(series) == {"mse", "psnr_db"}
    assert convergence_series({"loss": "l2", "per_step": [3, 2, 1]})[1]["l2 loss"].tolist() == [3, 2, 1]
    rep = BakeReport("p.toml", "out", tasks=[TaskOutcome("texture", "t/a", "built", metrics=manifest["metrics"])])
    page = render(rep, {"texture/t/a": b})
    assert page.count("<img") == 5  # reference, decoded, difference, convergence plot; the full-size viewer
    assert "difference \u00d74" in page


def test_rd_points_from_an_ntc_manifest():
    m = {"metrics": {"mean_psnr_db": 30.0}, "ntc": {"rate": {"bpp": 4.0, "tried": [{"bpp": 2.0, "mean_psnr_db": 27.0}]},
                                                   "baseline": {"total": {"bpp": 24.0, "mean_psnr": 38.0},
                                                                "same_bytes": {"bpp": 3.9, "mean_psnr": 25.0}}}}
    pts = rd_points(m)
    assert pts["neural (this bundle)"] == [(4.0, 30.0)] and pts["BCn (full size, same bytes)"] == [(3.9, 25.0), (24.0, 38.0)]
    assert rd_points({"metrics": {}}) == {}


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/setup.sh installs it)")
def test_report_html_renders_in_headless_chromium(device, project, tmp_path):
    """A real bake with a real stage, opened in a real browser: the DOM it builds holds a
    section per task and the decoded images, and a screenshot comes out."""
    from bakery.formats.images import encode_png
    from tests.images import photo_like

    (project / "src" / "a.png").write_bytes(encode_png(photo_like(32, seed=1)))
    (project / "src" / "b.png").unlink()
    (project / "pipeline.toml").write_text(BASIC_TOML.split("[stages.blur]")[0] + """
[stages.texture]
type = "neural_texture"
inputs = ["photos"]
params = { steps = 32, batch = 1024, width = 16, layers = 1, octaves = 3 }
""")
    bake()
    page = project / "out" / "report.html"
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'profile'}"]
    run = subprocess.run([*args, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120)
    dom = run.stdout
    assert "id=\"task-texture-photos-a\"" in dom and dom.count("<img") >= 4  # 3 images and the curve
    assert [line for line in run.stderr.splitlines() if ":CONSOLE" in line] == []  # no script errors, no warnings
    assert "data-full=\"texture/photos/a/preview.png\"" in dom  # a click opens the file full size
    from report_check import assert_section

    assert_section(project / "out" / "texture" / "photos" / "a", {"image": project / "src" / "a.png"}, images=3)
    shot = tmp_path / "shot.png"
    subprocess.run([*args, f"--screenshot={shot}", "--window-size=1000,800", page.as_uri()], capture_output=True,
                   timeout=120)
    from PIL import Image

    with Image.open(shot) as im:
        assert im.size == (1000, 800) and len(np.unique(np.asarray(im.convert("L")))) > 16  # not a blank page


def _page_of_two_images(tmp_path, img: np.ndarray) -> Path:
    """report.html for one bundle of a reference and a decoded image (``img`` and a copy a
    little brighter): thumbnails of both and of the difference the page draws."""
    from bakery.formats.images import encode_png
    from bakery.pipeline.html_report import render

    b = tmp_path / "texture" / "a"
    b.mkdir(parents=True)
    (b / "reference.png").write_bytes(encode_png(img))
    (b / "preview.png").write_bytes(encode_png(np.clip(img + 0.05, 0, 1)))
    files = [{"name": "reference.png", "role": "reference"}, {"name": "preview.png", "role": "preview"}]
    (b / "manifest.json").write_text(json.dumps({"files": files, "metrics": {"psnr_db": 26.0}}))
    rep = BakeReport("p.toml", "out", tasks=[TaskOutcome("texture", "a", "built", metrics={"psnr_db": 26.0})])
    page_file = tmp_path / "report.html"
    page_file.write_text(render(rep, {"texture/a": b}, root=tmp_path))
    return page_file


def _click_full_size(page_file: Path, selector: str) -> list[int]:
    """In a real browser: clicks the thumbnail ``selector``, checks the full-size view opens
    and closes again without a console message, and returns the opened image's size."""
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    from bakery.view.snapshot import chromium_path, launch

    if chromium_path() is None:
        pytest.skip("needs Debian's chromium (scripts/setup.sh installs it)")
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        console = []
        page.on("console", lambda m: console.append(m.text))
        page.on("pageerror", lambda e: console.append(str(e)))
        page.goto(page_file.as_uri())
        assert not page.is_visible("#full")
        page.click(selector)
        page.wait_for_function("document.querySelector('#full img').naturalWidth > 0")
        assert page.is_visible("#full")
        size = page.evaluate("[document.querySelector('#full img').naturalWidth, "
                             "document.querySelector('#full img').naturalHeight]")
        page.click("#full")
        assert not page.is_visible("#full")
        browser.close()
    assert console == []
    return size


def test_a_click_opens_an_image_full_size(tmp_path):
    """Clicking a thumbnail shows its full-size image over the page (the bundle's own
    file), clicking again closes it."""
    page_file = _page_of_two_images(tmp_path, np.random.default_rng(0).random((300, 40, 3)).astype(np.float32))
    assert _click_full_size(page_file, "img.texel[alt='decoded']") == [40, 300]  # not the 256-pixel thumbnail


def test_an_image_no_larger_than_a_thumbnail_is_embedded_once_and_a_click_opens_it(tmp_path):
    """A difference image the page draws itself (no file to link) at most a thumbnail wide
    is in the page once, and a click still opens it at its own size."""
    page_file = _page_of_two_images(tmp_path, np.random.default_rng(1).random((64, 48, 3)).astype(np.float32))
    uris = re.findall(r"data:image/[a-z]+;base64,[A-Za-z0-9+/=]+", page_file.read_text())
    assert len(uris) == len(set(uris)) >= 3  # three thumbnails, the difference's not twice
    assert _click_full_size(page_file, "img.texel[alt^='difference']") == [48, 64]
