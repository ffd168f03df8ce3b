"""The stage plugin contract.

A stage is a small class registered by type name (Mitsuba-style plugins). It declares
its parameter schema, a version string (part of every cache key) and a ``run`` that
receives a :class:`StageContext`. Its code needs no declaring: the cache key hashes every
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

from bakery.stages.params import Param, resolve_params


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
    """What ``run`` returns: metrics for the report/manifest and extra manifest fields."""

    metrics: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


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


class StepProgress:
    """Adapts a trainer's ``update(n)`` to the context's ``progress(done, total=...)``."""

    def __init__(self, ctx: StageContext, total: int):
        self.ctx, self.total, self.done = ctx, total, 0

    def update(self, n: int) -> None:
        self.done += n
        self.ctx.progress(self.done, total=self.total)


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
    #: Whether the stage needs a GPU device at all (cache key includes the device class).
    uses_device: ClassVar[bool] = True

    @classmethod
    def resolve(cls, given: Mapping[str, Any], *, where: str | None = None, key_prefix: str = "params") -> dict:
        """The stage's parameters from ``given`` (schema, defaults) with the rules between
        them checked (check_params): every caller refuses bad parameters before any work."""
        params = resolve_params(cls.params, given, where=where, key_prefix=key_prefix)
        cls.check_params(params, where=where, key_prefix=key_prefix)
        return params

    @classmethod
    def check_params(cls, params: Mapping[str, Any], *, where: str | None = None, key_prefix: str = "params") -> None:
        """Raises UsageError (key ``key_prefix.NAME``) where parameters contradict each
        other, which one parameter's schema cannot say. None by default."""

    def run(self, ctx: StageContext, inputs: Sequence[StageInput], params: Mapping[str, Any]) -> StageResult:
        raise NotImplementedError
