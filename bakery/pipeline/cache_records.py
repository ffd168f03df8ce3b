"""What the cache's metadata files look like when bakery wrote them (``sums.json``, task
records). A leaf module: the cache reads them, and ownership recognises bakery's files by
them, without either importing the other's safety checks."""

from __future__ import annotations

from typing import Any


def well_formed_sums(sums: Any) -> bool:
    """``sums.json`` as :meth:`Cache.put` writes it: name -> [size, sha256]."""
    return isinstance(sums, dict) and all(
        isinstance(k, str) and isinstance(v, list) and len(v) == 2 and isinstance(v[0], int)
        and not isinstance(v[0], bool) and isinstance(v[1], str) for k, v in sums.items())


_RECORD_TABLES = ("inputs", "params", "given", "upstream")


def well_formed_record(record: Any) -> bool:
    """A cache record as :meth:`Cache.write_record` writes it; anything else is read as
    no record (the task rebuilds) rather than crashing every bake."""
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        return False
    parts = record.get("parts")
    return isinstance(parts, dict) and all(isinstance(parts.get(k, {}), dict) for k in _RECORD_TABLES)
