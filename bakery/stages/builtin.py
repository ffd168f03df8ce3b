"""Imports every stage package under ``bakery/stages/`` so that each registers itself:
a new stage is one new folder, with no list to edit."""

import importlib
import pkgutil
from pathlib import Path

for _info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
    if _info.ispkg:
        importlib.import_module(f"bakery.stages.{_info.name}")
