"""Every result next to the baseline a studio would otherwise ship.

A stage measures its result and its baseline in the same run (BCn at equal bytes, box and
Toksvig mips, the uniform material, ...) and returns a :class:`Verdict`; the stage puts
it in the manifest (``verdict``) and its ``margin_db`` among the metrics, so
``require = { margin_db = 0 }`` gates on it. The pipeline reads verdicts back from
manifests (:meth:`bakery.stages.Stage.judge`) for the console and the report, knowing no
stage. A margin is in dB in every stage: a PSNR difference, or ``20 log10`` of an RMSE
ratio (the same thing), so one threshold reads the same everywhere.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Verdict:
    """A result against its baseline. ``margin_db`` > 0: the result is better. ``parts``
    compares the pieces (e.g. each texture of a set) as ``{name, result, baseline,
    margin_db}`` rows; ``reason`` says why a loss happened and what would win."""

    baseline: str            # what a studio would ship instead, e.g. "BCn at equal bytes"
    metric: str              # what both are measured by, e.g. "set PSNR (dB)"
    result: float
    baseline_value: float
    margin_db: float
    reason: str = ""
    parts: list[dict] = field(default_factory=list)

    @property
    def wins(self) -> bool:
        return not self.margin_db < 0  # a NaN margin is no loss anyone can act on

    def to_dict(self) -> dict:
        d = asdict(self)
        d["wins"] = self.wins
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Verdict":
        return cls(baseline=str(d["baseline"]), metric=str(d["metric"]), result=float(d["result"]),
                   baseline_value=float(d["baseline_value"]), margin_db=float(d["margin_db"]),
                   reason=str(d.get("reason") or ""),
                   parts=[{**p, **{k: float(p[k]) for k in ("result", "baseline", "margin_db") if k in p}}
                          for p in d.get("parts") or []])  # a manifest spells inf as "inf"

    def summary(self) -> str:
        """One line: ``+1.25 dB over BCn at equal bytes (24.31 vs 23.06 set PSNR (dB))``."""
        word = "over" if self.wins else "under"
        return (f"{self.margin_db:+.2f} dB {word} {self.baseline} ({_num(self.result)} vs "
                f"{_num(self.baseline_value)} {self.metric})")


def psnr_verdict(baseline: str, result: float, baseline_value: float, *, metric: str = "PSNR (dB)",
                 reason: str = "", parts: list[dict] | None = None) -> Verdict:
    """Two PSNRs; the margin is their difference."""
    return Verdict(baseline, metric, round(float(result), 4), round(float(baseline_value), 4),
                   _round(margin_of_psnr(result, baseline_value)), reason, parts or [])


def error_verdict(baseline: str, result: float, baseline_value: float, *, metric: str, power: bool = False,
                  reason: str = "", parts: list[dict] | None = None) -> Verdict:
    """Two errors (lower is better: an RMSE, or with ``power`` a squared error such as an
    MSE loss); the margin is ``20 log10`` (``10 log10``) of their ratio, i.e. the PSNR gain."""
    return Verdict(baseline, metric, float(result), float(baseline_value),
                   _round(margin_of_error(result, baseline_value, power=power)), reason, parts or [])


#: PSNRs above this count as this in a margin: 8-bit storage's own rounding noise is 58.9 dB,
#: so a flat map decoded at 78 dB does not lose to a lossless BC4 (inf) by an infinite margin.
PSNR_CEILING_DB = 60.0


def margin_of_psnr(result: float, baseline: float) -> float:
    return min(float(result), PSNR_CEILING_DB) - min(float(baseline), PSNR_CEILING_DB)


def margin_of_error(result: float, baseline: float, *, power: bool = False) -> float:
    """dB by which error ``result`` is below ``baseline`` (positive: smaller error)."""
    result, baseline = float(result), float(baseline)
    if result <= 0 and baseline <= 0:
        return 0.0
    if result <= 0:
        return math.inf
    if baseline <= 0:
        return -math.inf
    return (10.0 if power else 20.0) * math.log10(baseline / result)


def part(name: str, result: float, baseline: float, margin_db: float) -> dict:
    return {"name": name, "result": round(float(result), 4), "baseline": round(float(baseline), 4),
            "margin_db": _round(margin_db)}


def budget_reason(presets, settings, *, key: str = "steps", unit: str = "steps") -> str:
    """Why a loss may be the budget's: ``CPU budget: 300 steps (quality = production);
    quality = "final" runs 1000, a GPU 6000``, or that ``key`` was set by hand. Empty where
    the budget is already the largest. ``settings``: the task's resolved
    :class:`~bakery.stages.params.Settings` (values, ``given``, ``device_class``)."""
    from bakery.stages.params import AUTO

    params, device_class = settings, settings.device_class
    if settings.given.get(key, AUTO) != AUTO:
        return f"{key} = {params[key]} set in params; more {unit} may win"
    quality = params.get("quality", "production")
    table = presets.table
    here = table.get(device_class, {}).get(quality, {}).get(key)
    if here is None:
        return ""
    better = []
    final = table.get(device_class, {}).get("final", {}).get(key)
    if quality != "final" and final is not None and final > here:
        better.append(f'quality = "final" runs {final}')
    gpu = table.get("gpu", {}).get(quality, {}).get(key)
    if device_class != "gpu" and gpu is not None and gpu > here:
        better.append(f"a GPU {gpu}")
    if not better:
        return ""
    return f"{device_class.upper()} budget: {here} {unit} (quality = {quality}); " + ", ".join(better)


def _round(v: float) -> float:
    return round(float(v), 3) if math.isfinite(v) else float(v)


def _num(v: float) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
