"""Task specs: what the planner hands to runners, as plain serialisable records.

A :class:`TaskSpec` says everything a worker needs to build one bundle with no access to
the pipeline file or the planner's objects: the stage type and its settings (every
``auto`` resolved for the device class, :class:`bakery.stages.params.Settings`), the
inputs with their content hashes (or the upstream cache keys), the cache key itself and
where the output goes. It survives a round trip through JSON, so the same spec runs in
this process, in another one, or on another machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class InputSpec:
    """One input of a task: an asset's files by role, or an upstream task's bundle."""

    name: str
    files: dict[str, str] = field(default_factory=dict)   # role -> absolute path
    hashes: dict[str, str] = field(default_factory=dict)  # role -> sha256 of the file
    upstream: str | None = None                           # upstream task id
    upstream_key: str | None = None                       # its cache key (the bundle to read)


@dataclass(frozen=True)
class TaskSpec:
    """One (stage, asset) task, planned."""

    id: str
    stage: str                 # the [stages.NAME] it comes from
    stage_type: str
    asset: str
    settings: dict[str, Any]   # Settings.to_dict(): the values the stage runs with, as keyed
    seed: int
    inputs: tuple[InputSpec, ...]
    deps: tuple[str, ...]      # upstream task ids
    key: str                   # cache key ("" when it could not be computed: see error)
    parts: dict[str, Any]      # what the key hashes, to explain rebuilds
    out_dir: str               # absolute path of out/<stage>/<asset>
    device: str | None         # device kind to open (auto, vulkan, ...); None: the stage uses none
    device_class: str | None   # the class the key was computed for
    toolchain: dict | None = None  # bakery.device.Toolchain the key was computed for (device stages)
    plugins: tuple[str, ...] = ()  # modules to import for studio stages
    plugin_root: str = ""      # folder those modules are imported from
    error: str = ""            # why planning this task failed (unreadable input, ...)
    dispatch_timeout: float = 600.0  # seconds one device submission may run (not in the key)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TaskSpec":
        d = dict(d)
        d["inputs"] = tuple(InputSpec(**i) for i in d["inputs"])
        d["deps"] = tuple(d["deps"])
        d["plugins"] = tuple(d.get("plugins", ()))
        return cls(**d)
