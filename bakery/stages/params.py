"""Typed stage parameters: every stage declares its schema so a pipeline can be
validated (type, range, default) before any GPU work starts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from bakery.errors import UsageError


@dataclass(frozen=True)
class Param:
    """One parameter of a stage. ``type`` is one of int, float, bool, str."""

    name: str
    type: type
    default: Any
    doc: str = ""
    min: float | None = None
    max: float | None = None
    choices: Sequence[Any] | None = None

    def describe(self) -> str:
        if self.choices is not None:
            allowed = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.min is not None or self.max is not None:
            lo = "-inf" if self.min is None else f"{self.min:g}"
            hi = "inf" if self.max is None else f"{self.max:g}"
            allowed = f"{self.type.__name__} in [{lo}, {hi}]"
        else:
            allowed = self.type.__name__
        return f"allowed {allowed}, default {self.default!r}"

    def coerce(self, value: Any, *, where: str | None = None, key: str | None = None) -> Any:
        """Checks and converts one value; strings from the command line are parsed."""
        key = key or self.name
        v = value
        try:
            if isinstance(v, str) and self.type is not str:
                if self.type is bool:
                    low = v.strip().lower()
                    if low not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError(v)
                    v = low in ("true", "1", "yes")
                else:
                    v = self.type(v)
            elif self.type is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if self.type is not bool and isinstance(v, bool):
                raise ValueError(v)
            if not isinstance(v, self.type):
                raise ValueError(v)
        except (TypeError, ValueError):
            raise UsageError(f"expected {self.type.__name__}, got {value!r} ({self.describe()})",
                             where=where, key=key) from None
        if isinstance(v, float) and not math.isfinite(v):  # nan/inf would fail only after training
            raise UsageError(f"{value!r} is not a finite number ({self.describe()})", where=where, key=key)
        if self.choices is not None and v not in self.choices:
            raise UsageError(f"{v!r} is not allowed ({self.describe()})", where=where, key=key)
        if (self.min is not None and v < self.min) or (self.max is not None and v > self.max):
            raise UsageError(f"{v!r} is out of range ({self.describe()})", where=where, key=key)
        return v


def resolve_params(schema: Sequence[Param], given: Mapping[str, Any], *,
                   where: str | None = None, key_prefix: str = "params") -> dict[str, Any]:
    """Validates ``given`` against ``schema`` and fills defaults; unknown keys are errors."""
    by_name = {p.name: p for p in schema}
    for name in given:
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise UsageError(f"unknown parameter (known: {known})", where=where,
                             key=f"{key_prefix}.{name}")
    out = {}
    for p in schema:
        if p.name in given:
            out[p.name] = p.coerce(given[p.name], where=where, key=f"{key_prefix}.{p.name}")
        else:
            out[p.name] = p.default
    return out
