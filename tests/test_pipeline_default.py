"""The repository's own pipeline.toml and sample assets."""

import subprocess
import sys
from pathlib import Path


from pipeline_helpers import tree_snapshot

from bakery.pipeline.config import load_pipeline
from bakery.pipeline.graph import build_tasks

REPO = Path(__file__).resolve().parent.parent


def test_committed_assets_match_their_generator(tmp_path):
    subprocess.run([sys.executable, str(REPO / "scripts/make_assets.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    assert tree_snapshot(tmp_path) == tree_snapshot(REPO / "assets")
    mats = sorted(p.name for p in (tmp_path / "materials").iterdir())
    assert len(mats) >= 2
    for m in mats:
        roles = sorted(p.stem for p in (tmp_path / "materials" / m).iterdir())
        assert roles == ["albedo", "ao", "height", "metalness", "normal", "roughness"]


def test_sample_textures_are_256_rgb_with_natural_spectrum():
    import numpy as np

    from bakery.formats.images import load_image

    img = load_image(REPO / "assets/textures/rust.png")
    assert img.shape == (256, 256, 3)
    g = img.mean(axis=2) - img.mean()
    power = np.abs(np.fft.fft2(g)) ** 2
    f = np.hypot(*np.meshgrid(np.fft.fftfreq(256), np.fft.fftfreq(256)))
    low = power[(f > 0.02) & (f < 0.04)].mean()
    high = power[(f > 0.2) & (f < 0.4)].mean()
    assert low / high > 30  # energy falls with frequency like a photo, not white noise


def test_default_pipeline_validates():
    pipe = load_pipeline(REPO / "pipeline.toml")
    tasks = build_tasks(pipe)
    assert {t.id for t in tasks} == {"texture/textures/rust", "texture/textures/wood",
                                     "compress/materials/bricks", "compress/materials/cobblestones",
                                     "compress/materials/tiles", "shader_fit/fits/brightness",
                                     "shader_fit/fits/rainbow", "mips/materials/bricks",
                                     "mips/materials/cobblestones", "mips/materials/tiles",
                                     "procedural/textures/rust", "procedural/textures/wood",
                                     "neural_material/materials/bricks", "neural_material/materials/cobblestones",
                                     "neural_material/materials/tiles"}
    assert pipe.out == REPO / "out" and pipe.cache == REPO / ".bakery-cache"
