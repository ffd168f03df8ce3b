"""Imports every stage package under ``bakery/stages/`` so that each registers itself:
a new stage is one new folder, with no list to edit."""

import importlib
import pkgutil

import bakery.stages as _stages

for _info in sorted(pkgutil.iter_modules(_stages.__path__), key=lambda i: i.name):
    if _info.ispkg:
        importlib.import_module(f"bakery.stages.{_info.name}")
