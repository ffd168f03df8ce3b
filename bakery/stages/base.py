"""The stage plugin contract.

A stage is a small class registered by type name (Mitsuba-style plugins). It declares
its parameter schema (and what ``auto`` means: :attr:`Stage.presets`), a version string
(part of every cache key) and a ``run`` that receives a :class:`StageContext` and the
task's resolved :class:`~bakery.stages.params.Settings`; its hooks tell the pipeline what
it cannot know about a stage (the files an asset refers to, what ``auto`` means for one
task). Its code needs no declaring: the cache key hashes every
Python and Slang file the stage's package reaches (bakery.pipeline.fingerprint). Stage code never opens devices or writes files by
itself: the context hands it the device, a seeded RNG, progress, a logger and the
output writer, so the pipeline can cache, place outputs atomically and report.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from bakery.errors import UsageError
from bakery.stages.params import AUTO, Param, Presets, Settings, preset_class, resolve_params


@dataclass(frozen=True)
class StageInput:
    """What one task reads: a named asset made of files by role, or an upstream bundle.

    ``files`` maps a role (``image``, ``albedo``, ``normal``, ...) to a path. For an input
    that is another stage's output, ``bundle`` is that task's bundle as the bundle reader
    returns it (:class:`bakery.formats.reader.Bundle`: verified manifest, networks,
    textures, files by name and role).
    """

    name: str
    files: Mapping[str, Path] = field(default_factory=dict)
    bundle: Any = None


@dataclass
class StageResult:
    """What ``run`` returns: metrics for the report/manifest, extra manifest fields and
    the result against its baseline (:class:`bakery.verdict.Verdict`; its margin becomes
    the ``margin_db`` metric, which ``require`` can gate on)."""

    metrics: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    verdict: Any = None

    def all_metrics(self) -> dict[str, Any]:
        if self.verdict is None:
            return dict(self.metrics)
        return {**self.metrics, "margin_db": self.verdict.margin_db}


class StageContext:
    """Everything a stage may touch. Built by the pipeline executor or ``bakery run``."""

    def __init__(self, *, device_provider: Callable[[], Any], seed: int, out: Any,
                 progress: Callable[..., Any], log: logging.Logger):
        self._device_provider = device_provider
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.out = out
        self.progress = progress
        self.log = log

    @property
    def device(self):
        """The shared :class:`bakery.device.Device`; opened on first use only."""
        return self._device_provider()


#: type name -> stage class; filled by :func:`register`, read through ``bakery.stages``.
REGISTRY: dict[str, type["Stage"]] = {}


def register(cls: type["Stage"]) -> type["Stage"]:
    """Class decorator: makes a stage available under ``cls.type_name``."""
    if not cls.type_name:
        raise ValueError(f"{cls.__name__} has no type_name")
    REGISTRY[cls.type_name] = cls
    return cls


class Stage:
    """Base class of every bake stage; subclasses are registered with :func:`register`."""

    type_name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ""
    params: ClassVar[Sequence[Param]] = ()
    #: Input roles this stage accepts; ``image`` for single-texture stages.
    input_roles: ClassVar[Sequence[str]] = ("image",)
    #: With several declared inputs, False runs one task per asset of each input (a
    #: union); True joins them by asset name, one task getting one input from each.
    joins_inputs: ClassVar[bool] = False
    #: Whether the stage reads another stage's bundle (a ``"stage:NAME"`` input,
    #: ``StageInput.bundle``); a pipeline feeding one to a stage that does not is refused
    #: at validation rather than failing every task.
    reads_bundles: ClassVar[bool] = False
    #: Whether the stage needs a GPU device at all (cache key includes the device class).
    uses_device: ClassVar[bool] = True
    #: What a studio would ship instead of this stage's result, measured in the same run
    #: (bakery.verdict): e.g. "BCn at equal bytes". Empty: the stage makes no claim to judge.
    baseline: ClassVar[str] = ""
    #: Metric name -> (readable name, one-line explanation), for the console, the report
    #: and ``require`` validation; ``"psnr_db.*"`` covers nested ones (``{}`` is the rest).
    metric_docs: ClassVar[Mapping[str, tuple[str, str]]] = {}

    #: Roughly how many seconds one task takes on a GPU at production quality: orders a
    #: first bake's tasks, longest first, where several run at once (later bakes go by
    #: the cache's record of each task's last build; bakery.pipeline.dispatch).
    typical_seconds: ClassVar[float] = 10.0

    #: What ``auto`` means for this stage, per device class and quality (None: no
    #: automatic parameters, and no ``resolved_params`` in the manifest).
    presets: ClassVar[Presets | None] = None

    @classmethod
    def validate(cls, given: Mapping[str, Any], *, where: str | None = None, key_prefix: str = "params") -> dict:
        """The stage's parameters from ``given`` (schema, defaults) with the rules between
        them checked (check_params): the one validation pass, before any work. ``auto``
        stays ``auto`` here; :meth:`settings` resolves it."""
        params = resolve_params(cls.params, given, where=where, key_prefix=key_prefix)
        cls.check_params(params, where=where, key_prefix=key_prefix)
        return params

    @classmethod
    def referenced_files(cls, files: Mapping[str, Path]) -> dict[str, Path]:
        """Files this asset reads besides its own ``files``, by role (``ROLE.NAME``): a fit
        spec's shader and images. The pipeline hashes them into the task's key, matches
        ``--changed`` against them and hands them to ``run`` with the asset's own. Read
        while planning, so a file that does not load refers to nothing (its task then
        fails and says why). None by default."""
        return {}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], *, where: str | None = None, key_prefix: str = "params") -> None:
        """Raises UsageError (key ``key_prefix.NAME``) where parameters contradict each
        other, which one parameter's schema cannot say. None by default."""

    @classmethod
    def resolve_auto(cls, params: Mapping[str, Any], *, device_class: str, files: Mapping[str, Path]) -> dict:
        """``params`` with every ``auto`` replaced by what it means for one task: the
        preset of ``device_class`` (``cpu`` / ``gpu``) at the chosen quality. A stage
        whose presets depend on its input (an image's size, a spec's own value) reads it
        from ``files`` (role -> path of the task's source files; headers only: this runs
        while planning) and raises UsageError naming the file when it cannot."""
        return cls.presets.resolve(params, device_class=device_class)

    @classmethod
    def settings(cls, params: Mapping[str, Any], *, device_class: str | None,
                 files: Mapping[str, Path]) -> Settings:
        """The settings one task runs with: ``params`` (validated) resolved for the class
        of the device it will open (``vulkan:ADAPTER``; None when the stage uses none)."""
        dclass = preset_class(device_class)
        if cls.presets is None:
            return Settings(dict(params), dict(params), dclass)
        values = cls.resolve_auto(params, device_class=dclass, files=files)
        left = sorted(k for k, v in values.items() if v == AUTO)
        if left:  # a preset table missing a row is the stage's bug, not the user's
            raise UsageError(f"no preset for {', '.join(left)} ({dclass}, {values.get('quality')})",
                             key=f"params.{left[0]}")
        return Settings(values, dict(params), dclass)

    def run(self, ctx: StageContext, inputs: Sequence[StageInput], params: Settings) -> StageResult:
        raise NotImplementedError

    @classmethod
    def judge(cls, manifest: Mapping[str, Any]):
        """This task's :class:`bakery.verdict.Verdict` against its baseline, read back from
        its manifest (``verdict``, written by ``run``); None where the stage judges nothing."""
        from bakery.verdict import Verdict

        record = manifest.get("verdict")
        return Verdict.from_dict(record) if isinstance(record, Mapping) else None

    @classmethod
    def report_section(cls, view) -> str:
        """The stage's section of ``out/report.html`` for one bundle
        (:class:`bakery.reporting.BundleView`); the standard one by default, which a stage
        extends with its own plots (``reporting.section(view, extra=[...])``)."""
        from bakery import reporting

        return reporting.section(view)
