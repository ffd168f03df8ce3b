"""Stage registry: stages are looked up by the ``type`` written in pipeline.toml.

The built-in stages are found and imported on the first lookup (``builtin``); they import
the contract from ``bakery.stages.base`` and ``bakery.stages.params``, never this module,
so discovery and registration form no import circle. Studio plugins may import
everything from here.
"""

from __future__ import annotations

from bakery.errors import UsageError, did_you_mean
from bakery.stages.base import REGISTRY as _REGISTRY
from bakery.stages.base import Stage, StageContext, StageInput, StageResult, register
from bakery.stages.params import Param, resolve_params


def known_stages() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def known_input_roles() -> list[str]:
    """Every input role some registered stage reads, in registration order."""
    _load_builtin()
    return list(dict.fromkeys(r for cls in _REGISTRY.values() for r in cls.input_roles))


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
           "known_input_roles", "known_stages", "register", "resolve_params"]
