"""The planner: a validated pipeline in, :class:`TaskSpec` records with cache keys out.

Pure: it reads input files to hash them and lists adapters to learn the device class
and toolchain (bakery.device.probe_toolchain), but opens no device, writes nothing and
runs no stage. Parameters left ``auto`` are resolved here, for that device class
(``Stage.settings``), so the key covers the values a stage will run with. ``bakery bake
--dry-run`` is a plan plus a look into the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bakery.errors import UsageError
from bakery.pipeline.cache import key_of, key_parts, sha256_file
from bakery.pipeline.config import Pipeline
from bakery.pipeline.fingerprint import stage_fingerprint
from bakery.pipeline.graph import Task, build_tasks, select_tasks
from bakery.pipeline.spec import InputSpec, TaskSpec


@dataclass
class PlanOptions:
    only: Sequence[str] = ()
    assets: Sequence[str] = ()           # fnmatch globs over asset names
    changed: Sequence[Path] | None = None
    device: str | None = None            # overrides [project] device
    fingerprint_memo: Path | None = None  # stage fingerprints kept between processes (fingerprint.py)


class _DeviceClass:
    """Probes the device class and toolchain once, and only if some task uses a device."""

    def __init__(self, kind: str):
        self.kind = kind
        self._value: str | None = None
        self._toolchain: dict | None = None
        self._probed = False

    def _probe(self) -> None:
        if not self._probed:
            from bakery.device import probe_device_class, probe_toolchain

            self._value, self._probed = probe_device_class(self.kind), True
            found = probe_toolchain(self.kind) if self._value else None
            self._toolchain = found.to_dict() if found is not None else None

    def get(self) -> str:
        self._probe()
        return self._value or f"{self.kind}:unavailable"

    def toolchain(self) -> dict | None:
        """bakery.device.Toolchain as a dict; None where no device can be opened."""
        self._probe()
        return self._toolchain


def plan(pipe: Pipeline, opts: PlanOptions | None = None) -> list[TaskSpec]:
    """Every selected task of ``pipe`` in execution order, each with its cache key."""
    opts = opts or PlanOptions()
    tasks = select_tasks(pipe, build_tasks(pipe), only=opts.only, assets=opts.assets, changed=opts.changed)
    kind = opts.device or pipe.device
    device_class = _DeviceClass(kind)
    planned: dict[str, TaskSpec] = {}
    for t in tasks:
        planned[t.id] = _plan_one(pipe, t, planned, kind, device_class, opts.fingerprint_memo)
    return list(planned.values())


def _source_hashes(spec: TaskSpec) -> dict[str, str]:
    return {r: h for i in spec.inputs for r, h in i.hashes.items()}


def _plan_one(pipe: Pipeline, t: Task, planned: dict[str, TaskSpec], kind: str,
              device_class: _DeviceClass, fingerprint_memo: Path | None = None) -> TaskSpec:
    cls = t.stage.stage_cls
    dclass = device_class.get() if cls.uses_device else None
    error = ""
    try:
        settings = cls.settings(t.stage.params, device_class=dclass, files=t.files)
    except UsageError as e:  # an input the presets read is unreadable: this task fails, not the plan
        error, settings = e.one_line(), None
    common = dict(id=t.id, stage=t.stage.name, stage_type=cls.type_name, asset=t.asset,
                  settings=settings.to_dict() if settings is not None else {}, seed=t.stage.seed, deps=tuple(t.deps),
                  out_dir=str(t.out_dir(pipe.out).absolute()), device=kind if cls.uses_device else None,
                  plugins=tuple(pipe.plugins), plugin_root=str(pipe.root),
                  dispatch_timeout=t.stage.dispatch_timeout or pipe.dispatch_timeout)
    inputs = []
    for inp in t.inputs:
        if inp.upstream is not None:
            # The upstream's source hashes ride along (its key covers them already) so
            # a rebuild can name the source file that changed, not just "upstream".
            up = planned[inp.upstream]
            inputs.append(InputSpec(inp.name, hashes=_source_hashes(up), upstream=inp.upstream,
                                    upstream_key=up.key))
            continue
        try:
            hashes = {r: sha256_file(p) for r, p in sorted(inp.files.items())}
        except OSError as e:
            error, hashes = f"cannot read input: {e}", {}
        inputs.append(InputSpec(inp.name, {r: str(p) for r, p in sorted(inp.files.items())}, hashes))
    toolchain = device_class.toolchain() if cls.uses_device else None
    if error:
        return TaskSpec(**common, inputs=tuple(inputs), key="", parts={}, device_class=dclass, toolchain=toolchain,
                        error=error)
    file_hashes = {r: h for i in inputs for r, h in i.hashes.items()} if len(inputs) == 1 else \
        {f"{i.name}.{r}": h for i in inputs for r, h in i.hashes.items()}
    parts = key_parts(stage_type=cls.type_name, stage_version=str(cls.version), asset=t.asset,
                      params=dict(settings.values), given=dict(settings.given), seed=t.stage.seed,
                      inputs=file_hashes, upstream={i.upstream: i.upstream_key for i in inputs if i.upstream},
                      code=stage_fingerprint(cls, fingerprint_memo), device_class=dclass, toolchain=toolchain)
    return TaskSpec(**common, inputs=tuple(inputs), key=key_of(parts), parts=parts, device_class=dclass,
                    toolchain=toolchain)
