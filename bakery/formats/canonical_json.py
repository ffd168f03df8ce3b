"""Deterministic JSON for manifests: same data, same bytes.

Keys are sorted, floats use Python's shortest round-trip repr, numpy scalars and arrays
become plain numbers and lists, and non-finite floats (a PSNR of ``inf`` for a lossless
result) become the strings ``"inf"``, ``"-inf"`` and ``"nan"`` so the file stays
standard JSON that every engine's parser accepts.
"""

from __future__ import annotations

import json
import math
from pathlib import PurePath

import numpy as np


def normalize(obj):
    """A copy of ``obj`` made only of dict/list/str/int/float/bool/None."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"manifest keys must be strings, got {k!r}")
            out[k] = normalize(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [normalize(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return normalize(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, PurePath):
        return obj.as_posix()
    raise TypeError(f"cannot store {type(obj).__name__} in a manifest: {obj!r}")


def dumps(obj) -> bytes:
    """UTF-8 JSON bytes, sorted keys, 2-space indent, trailing newline."""
    text = json.dumps(normalize(obj), sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False)
    return (text + "\n").encode("utf-8")
