"""Typed stage parameters: every stage declares its schema so a pipeline can be
validated (type, range, default) before any GPU work starts.

A training parameter may default to ``auto``: it means a value per device class (a CPU
Vulkan device gets a preview-sized budget, a GPU production quality) and per input size,
through the stage's :class:`Presets`. The planner resolves it once, before keying
(``Stage.settings``), so the cache key, ``--dry-run`` and the manifest's
``resolved_params`` all see the values used, and a stage's ``run`` receives
:class:`Settings` with no ``auto`` left. The shared :data:`QUALITY` parameter picks the
preset tier (``preview`` / ``production`` / ``final``). How a stage adopts it:
docs/PIPELINE.md, "Device-aware defaults".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from bakery.errors import UsageError, did_you_mean

#: The default of a parameter the stage resolves per device class and input size.
AUTO = "auto"
QUALITIES = ("preview", "production", "final")
#: Device classes a preset table is keyed by: :func:`preset_class` picks one.
DEVICE_CLASSES = ("cpu", "gpu")


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
        if self.auto:
            allowed += " or 'auto'"
        return f"allowed {allowed}, default {self.default!r}"

    @property
    def auto(self) -> bool:
        """Whether ``auto`` is allowed: the parameter defaults to it (a string parameter
        only where its choices leave no other meaning to the word)."""
        return self.default == AUTO and (self.type is not str or (self.choices is not None
                                                                   and AUTO not in self.choices))

    def coerce(self, value: Any, *, where: str | None = None, key: str | None = None) -> Any:
        """Checks and converts one value; strings from the command line are parsed."""
        key = key or self.name
        v = value
        if self.auto and isinstance(v, str) and v.strip().lower() == AUTO:
            return AUTO
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
            raise UsageError(f"unknown parameter{did_you_mean(name, by_name)} (known: {known})", where=where,
                             key=f"{key_prefix}.{name}")
    out = {}
    for p in schema:
        if p.name in given:
            out[p.name] = p.coerce(given[p.name], where=where, key=f"{key_prefix}.{p.name}")
        else:
            out[p.name] = p.default
    return out


#: The preset tier, shared by every stage with ``auto`` parameters.
QUALITY = Param("quality", str, "production", "preset tier of the 'auto' parameters",
                choices=QUALITIES)


def preset_class(device_class: str | None) -> str:
    """The preset row of a device class (``vulkan:ADAPTER``, as the planner probes it):
    ``cpu`` for a software Vulkan device (lavapipe), for no device at all (a stage that
    uses none runs on the CPU) and for none found (the bake will fail to open one);
    ``gpu`` otherwise."""
    from bakery.device import is_software_class

    if device_class is None or device_class.endswith(":unavailable") or is_software_class(device_class):
        return "cpu"
    return "gpu"


@dataclass(frozen=True)
class Presets:
    """What ``auto`` means for one stage: values per device class and quality tier.

    ``table[device_class][quality]`` maps parameter names to values. ``fit`` (optional)
    adapts a preset to the input size, e.g. no batch larger than the image's texel count:
    it gets the values and ``size`` (what the stage passes, e.g. texels) and returns them.
    """

    table: Mapping[str, Mapping[str, Mapping[str, Any]]]
    fit: Callable[[dict, Any], dict] | None = None

    def resolve(self, params: Mapping[str, Any], *, device_class: str, size: Any = None) -> dict[str, Any]:
        """``params`` with every ``auto`` replaced; explicit values are kept as given."""
        quality = params.get("quality", "production")
        preset = dict(self.table[device_class][quality])
        if self.fit is not None:
            preset = self.fit(preset, size)
        out = dict(params)
        for name, value in params.items():
            if value == AUTO:
                if name not in preset:
                    raise KeyError(f"no preset for parameter {name!r} ({device_class}, {quality})")
                out[name] = preset[name]
        return out

    def markdown(self) -> str:
        """The table as Markdown, one row per device class and tier: docs/PIPELINE.md's
        "Device-aware defaults" holds this text for every stage (a test keeps it current)."""
        names = list(dict.fromkeys(k for tiers in self.table.values() for row in tiers.values() for k in row))
        lines = ["| device | quality | " + " | ".join(f"`{n}`" for n in names) + " |",
                 "| --- | --- |" + " ---: |" * len(names)]
        for dclass, tiers in self.table.items():
            for quality, row in tiers.items():
                lines.append(f"| {dclass} | {quality} | " + " | ".join(_cell(row.get(n, "")) for n in names) + " |")
        return "\n".join(lines)


def _cell(value: Any) -> str:
    """A preset value as pipeline.toml spells it (thousands grouped)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:,}" if isinstance(value, int) else str(value)


def resolved_record(params: Mapping[str, Any], resolved: Mapping[str, Any], *, device_class: str) -> dict:
    """The manifest's ``resolved_params``: every value used, and which came from ``auto``."""
    return {"device_class": device_class, "quality": resolved.get("quality"),
            "auto": sorted(k for k, v in params.items() if v == AUTO),
            "values": dict(sorted(resolved.items()))}


@dataclass(frozen=True)
class Settings(Mapping[str, Any]):
    """A task's parameters as its stage runs with them: a read-only mapping of every
    parameter to a value of its declared type, ``auto`` already resolved.

    ``given`` keeps what the pipeline asked for (``auto`` where it left a parameter
    automatic) and ``device_class`` the preset row the automatic values came from
    (``cpu`` / ``gpu``). A spec carries it as :meth:`to_dict`, so a worker elsewhere
    runs exactly the values the key was computed for.
    """

    values: Mapping[str, Any]
    given: Mapping[str, Any] = field(default_factory=dict)
    device_class: str = "cpu"

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def auto(self) -> list[str]:
        """The parameters that were ``auto``, sorted."""
        return sorted(k for k, v in self.given.items() if v == AUTO)

    def record(self) -> dict:
        """The manifest's ``resolved_params``: every value used, and which came from ``auto``."""
        return resolved_record(self.given, self.values, device_class=self.device_class)

    def to_dict(self) -> dict:
        return {"values": dict(self.values), "given": dict(self.given), "device_class": self.device_class}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Settings":
        return cls(dict(d["values"]), dict(d["given"]), d["device_class"])
