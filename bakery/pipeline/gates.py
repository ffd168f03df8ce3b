"""Quality gates: ``require = { psnr_db = 30 }`` on a ``[stages.NAME]`` table.

A gate names a metric the stage reports (its manifest's ``metrics``; a nested one as
``psnr_db.normal``) and a bound. A bare
number is a minimum, except for metrics where lower is better (names with ``loss``,
``error``, ``mse``, ``bpp``, ``bytes``), where it is a maximum; ``{ min = .. }`` /
``{ max = .. }`` say it explicitly. A task whose bundle misses its gate fails (exit 1)
with the reason; the bundle is still published and cached, so it can be inspected, and
changing only the gate re-checks without rebuilding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

LOWER_IS_BETTER = ("loss", "error", "mse", "bpp", "bytes")


@dataclass(frozen=True)
class Gate:
    metric: str
    min: float | None = None
    max: float | None = None
    where: str = ""  # pipeline.toml:LINE of the require key

    def failure(self, metrics: Mapping[str, Any]) -> str | None:
        """Why ``metrics`` miss this gate, or None when they pass."""
        at = f" ({self.where})" if self.where else ""
        from bakery.pipeline.report import flatten_metrics

        metrics = flatten_metrics(dict(metrics))
        if self.metric not in metrics:
            known = ", ".join(sorted(metrics)) or "none"
            return f"quality gate: the stage reports no metric {self.metric!r} (it reports: {known}){at}"
        value = metrics[self.metric]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"quality gate: metric {self.metric!r} is {value!r}, not a number{at}"
        if self.min is not None and not value >= self.min:
            return f"quality gate: {self.metric} {value:.4g} is below the required {self.min:g}{at}"
        if self.max is not None and not value <= self.max:
            return f"quality gate: {self.metric} {value:.4g} is above the allowed {self.max:g}{at}"
        return None


def lower_is_better(metric: str) -> bool:
    return any(word in metric for word in LOWER_IS_BETTER)


def parse_require(raw: Any, key: str, add: Callable[[str, str], None], where: Callable[[str], str]) -> list[Gate]:
    """The gates of one ``require`` table; problems go to ``add(key, message)``."""
    if not isinstance(raw, dict):
        add(key, "expected a table of metric bounds, e.g. require = { psnr_db = 30 }")
        return []
    gates = []
    for metric, bound in raw.items():
        k = f"{key}.{metric}"
        if _number(bound):
            lo, hi = (None, float(bound)) if lower_is_better(metric) else (float(bound), None)
        elif isinstance(bound, dict) and bound and set(bound) <= {"min", "max"} \
                and all(_number(v) for v in bound.values()):
            lo, hi = (float(bound["min"]) if "min" in bound else None), \
                     (float(bound["max"]) if "max" in bound else None)
        else:
            add(k, f"expected a number or {{ min = N, max = N }}, got {bound!r}")
            continue
        gates.append(Gate(metric, lo, hi, where(k)))
    return gates


def first_failure(gates: list[Gate], metrics: Mapping[str, Any]) -> str | None:
    failures = [f for f in (g.failure(metrics) for g in gates) if f]
    return "; ".join(failures) or None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
