"""One tiny task per registered stage (and per variant worth its own bytes): inputs made in
code or cut from assets/, and parameters that bake in seconds on lavapipe. The stage
contract (tests/test_stage_contract.py) bakes each and checks what every stage owes.

A new stage adds a row here and its budget to BUDGETS; the contract fails until it does."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bakery.formats.images import encode_png, load_image
from bakery.pipeline.config import role_files
from bakery.pipeline.task import run_task, settings_for
from bakery.stages import StageInput, get_stage
from tests.images import photo_like

REPO = Path(__file__).resolve().parent.parent
SEED = 5


def texture(folder: Path, size: int = 32) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "photo.png"
    path.write_bytes(encode_png(photo_like(size, seed=3)))
    return {"image": path}


def material(folder: Path, size: int = 32) -> dict[str, Path]:
    """The bricks material cut to ``size`` (every role the sample set has)."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted((REPO / "assets" / "materials" / "bricks").glob("*.png")):
        (folder / f.name).write_bytes(encode_png(load_image(f)[:size, :size]))
    return role_files(folder, ("albedo", "normal", "roughness", "metalness", "ao", "height"))


def fit_spec(optimizer: str) -> Callable[[Path], dict[str, Path]]:
    def make(folder: Path) -> dict[str, Path]:
        shutil.copytree(REPO / "assets" / "fit", folder)
        spec = folder / "rainbow.toml"
        spec.write_text(spec.read_text().replace('optimizer = "adam"', f'optimizer = "{optimizer}"'))
        return {"fit": spec}
    return make


#: Per stage, the automatic parameters whose product is its training budget: a higher
#: quality tier must raise it on every device class.
BUDGETS = {
    "neural_texture": ("steps", "batch"),
    "ntc": ("steps", "batch"),
    "fit": ("steps",),
    "mipmap": ("steps", "pairs"),
    "procedural": ("generations", "population", "restarts", "steps", "batch"),
    "neural_material": ("steps", "batch"),
}


@dataclass(frozen=True)
class TinyTask:
    id: str
    stage: str                                 # registered type name
    inputs: Callable[[Path], dict[str, Path]]  # a fresh folder -> the task's files by role
    params: dict[str, Any]                     # what is not given stays at its default (``auto`` too)
    #: Automatic values the stage adapts to its input, where they differ from the preset row.
    adapted: dict[str, Any] = field(default_factory=dict)
    #: (manifest path, names): a section of the stage's own manifest repeating values used.
    echo: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    #: Manifest entries the task's own parameters imply (path -> value).
    manifest: dict[tuple[str, ...], Any] = field(default_factory=dict)


TASKS = (
    # batch left auto: a 32^2 image caps it at its 1024 texels whatever the device's preset
    TinyTask("neural_texture", "neural_texture", texture,
             {"quality": "preview", "steps": 20, "lr": 0.02, "width": 16, "layers": 1, "octaves": 3},
             adapted={"batch": 1024}),
    *(TinyTask(f"ntc-{w}", "ntc", material,
               {"quality": "preview", "steps": 20, "bpp": 18, "batch": 1024, "hidden": 16, "layers": 1,
                "baseline": False, "weighting": w},
               # under COHERENT_FROM texels: independent texels, dense updates on every device
               adapted={"patches": False, "latent_updates": "dense"},
               echo=((("ntc", "training"), ("device_class", "quality", "steps", "batch", "hidden", "weighting")),))
      for w in ("uniform", "margin")),
    *(TinyTask(f"fit-{o}", "fit", fit_spec(o), {"steps": 30},
               echo=((("fit",), ("steps",)),), manifest={("fit", "optimizer"): o, ("fit", "steps_from"): "param"})
      for o in ("adam", "amsgrad", "adamw")),
    TinyTask("mipmap", "mipmap", material, {"quality": "preview", "steps": 20},
             echo=((("mipmap", "settings"), ("steps", "pairs", "eval_pairs")),)),
    TinyTask("procedural", "procedural", texture,
             {"quality": "preview", "generations": 1, "population": 4, "restarts": 2, "steps": 40,
              "refine_steps": 0},
             echo=((("search",), ("generations", "population", "beam", "restarts", "steps", "batch", "fit_size",
                                  "refine_steps")),)),
    TinyTask("neural_material", "neural_material", lambda folder: material(folder, 16),
             {"quality": "preview", "steps": 20, "batch": 256, "hidden": 8, "encoder_hidden": 8,
              "eval_directions": 2, "finetune_steps": 5},
             echo=((("neural_material", "training"), ("device_class", "quality", "steps", "batch", "hidden",
                                                      "encoder_hidden", "lr", "finetune_steps")),)),
)


@dataclass
class Baked:
    """A tiny task baked twice with one seed: its bundles and the first one's manifest."""

    task: TinyTask
    stage: type
    settings: Any
    bundles: tuple[Path, Path]
    manifest: dict


def bake(task: TinyTask, root: Path, device) -> Baked:
    """Bakes ``task`` twice (seed :data:`SEED`) on ``device``, as a bake's worker does."""
    stage = get_stage(task.stage)
    inputs = [StageInput(task.id, task.inputs(root / "inputs"))]
    settings = settings_for(stage, task.params, inputs, device_class=device.device_class)
    bundles, manifests = [], []
    for name in ("a", "b"):
        out = root / name
        manifests.append(run_task(stage, inputs, settings, seed=SEED, device_provider=lambda: device, out_dir=out,
                                  log=logging.getLogger(f"contract.{task.id}")))
        bundles.append(out)
    return Baked(task, stage, settings, (bundles[0], bundles[1]), manifests[0])
