"""Choosing the CoopVec backend's gradient reduction for a benchmark run.

The product picks one per device and network (bakery.nn.parameters.default_reduction);
a benchmark that compares designs makes every ParameterStore of the process take the one
it names instead, by replacing that choice. Nothing in ``bakery/`` holds such a setting.
"""

from __future__ import annotations

import json
from pathlib import Path

from bakery.nn import parameters
from bakery.nn.parameters import CoopVecReduction

_PRODUCT_CHOICE = parameters.default_reduction
_chosen: CoopVecReduction | None = None


def always(reduction: CoopVecReduction):
    """A stand-in for default_reduction that picks ``reduction`` for every network."""
    return lambda device, spec: reduction


def use(reduction: CoopVecReduction | None) -> CoopVecReduction | None:
    """Every ParameterStore made from now on takes ``reduction`` (None: the product's choice)."""
    global _chosen
    _chosen = reduction
    parameters.default_reduction = _PRODUCT_CHOICE if reduction is None else always(reduction)
    return reduction


def use_json(spec: str) -> CoopVecReduction:
    """:func:`use` from JSON: a CoopVecReduction's fields, or bench/grad_reduction.py's
    output file (its "best" entry)."""
    d = json.loads(Path(spec).read_text() if Path(spec).is_file() else spec)
    if "benchmark" in d:  # a grad_reduction.py result: its fastest correct variant, if any
        d = d.get("best") or {}
    return use(CoopVecReduction(**d))


def chosen() -> CoopVecReduction | None:
    """The reduction :func:`use` set, or None where the product chooses."""
    return _chosen
