"""Stage registry: stages are looked up by the ``type`` written in pipeline.toml."""

from __future__ import annotations

from bakery.errors import UsageError, did_you_mean
from bakery.stages.base import Stage, StageContext, StageInput, StageResult
from bakery.stages.params import Param, resolve_params

_REGISTRY: dict[str, type[Stage]] = {}


def register(cls: type[Stage]) -> type[Stage]:
    """Class decorator: makes a stage available under ``cls.type_name``."""
    if not cls.type_name:
        raise ValueError(f"{cls.__name__} has no type_name")
    _REGISTRY[cls.type_name] = cls
    return cls


def known_stages() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def get_stage(type_name: str, *, where: str | None = None, key: str | None = "type") -> type[Stage]:
    _load_builtin()
    try:
        return _REGISTRY[type_name]
    except KeyError:
        raise UsageError(f"unknown stage type {type_name!r}{did_you_mean(type_name, _REGISTRY)} "
                         f"(known: {', '.join(sorted(_REGISTRY))})",
                         where=where, key=key) from None


def _load_builtin() -> None:
    # Imported lazily so that `import bakery.stages` never pulls in slangpy.
    from bakery.stages import builtin  # noqa: F401


__all__ = ["Param", "Stage", "StageContext", "StageInput", "StageResult", "get_stage",
           "known_stages", "register", "resolve_params"]
