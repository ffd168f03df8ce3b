"""What a bake did, for machines (bake-report.json) and for people (the summary table)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import bakery
from bakery.reporting import flatten as flatten_metrics  # the one flattening of nested metrics

STATUSES = ("built", "cached", "failed", "skipped")


@dataclass
class TaskOutcome:
    stage: str
    asset: str
    status: str  # built | cached | failed | skipped (dry-run: would-build | cached)
    reason: str = ""
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    key: str | None = None
    out_dir: str | None = None
    log: str | None = None
    params: dict[str, Any] | None = None  # the values the stage runs with (``auto`` resolved)
    auto: list[str] = field(default_factory=list)  # which of them were ``auto``
    stage_type: str | None = None
    in_this_bake: bool = True  # False: a task outside an --only/--asset/--changed bake, listed as out/ holds it
    verdict: dict[str, Any] | None = None  # bakery.verdict.Verdict.to_dict(): the result against its baseline

    @property
    def loses(self) -> bool:
        return bool(self.verdict) and not self.verdict.get("wins", True)


@dataclass
class BakeReport:
    pipeline: str
    out: str
    dry_run: bool = False
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    device: dict | None = None
    notes: list[str] = field(default_factory=list)
    tasks: list[TaskOutcome] = field(default_factory=list)
    determinism: dict | None = None  # --verify-determinism: bakery.pipeline.determinism.DeterminismCheck

    @property
    def nondeterministic(self) -> bool:
        return bool(self.determinism and self.determinism.get("difference"))

    def totals(self) -> dict[str, int]:
        t = {s: 0 for s in STATUSES}
        for o in self.tasks:
            t[o.status] = t.get(o.status, 0) + 1
        t["total"] = len(self.tasks)
        return t

    @property
    def failed(self) -> bool:
        return any(o.status == "failed" for o in self.tasks)

    def to_dict(self) -> dict:
        return {
            "schema": 1,
            "bakery_version": bakery.__version__,
            "pipeline": self.pipeline,
            "out": self.out,
            "dry_run": self.dry_run,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "seconds": round(self.seconds, 3),
            "device": self.device,
            "notes": self.notes,
            "totals": self.totals(),
            "tasks": [asdict(o) for o in self.tasks],
            "determinism": self.determinism,
        }

    def write(self, path: Path) -> None:
        """Atomic write, so a reader never sees half a report."""
        from bakery.formats.publish import write_atomic

        write_atomic(Path(path), (json.dumps(self.to_dict(), indent=1) + "\n").encode())

    def table(self, labels: Callable[[TaskOutcome, str], str] | None = None) -> str:
        """The human summary: one row per task (a result that loses to its baseline says
        so), totals, then each stage's metrics as an aligned table (one column per metric,
        headed by its readable name: ``labels(task, name)``, the stage's metric_docs by default)."""
        rows = [("stage", "asset", "status", "seconds", "vs baseline", "detail")]
        for o in self.tasks:
            v = o.verdict
            versus = "" if not v else f"{v['margin_db']:+.2f} dB" + (" LOSES" if o.loses else "")
            rows.append((o.stage, o.asset, o.status, f"{o.seconds:.2f}", versus, o.error or o.reason))
        lines = _align(rows, last_free=True)
        t = self.totals()
        verb, n = ("would build", t.get("would-build", 0)) if self.dry_run else ("built", t["built"])
        lines.append(f"{t['total']} tasks: {n} {verb}, {t['cached']} cached, "
                     f"{t['failed']} failed, {t['skipped']} skipped in {self.seconds:.2f} s")
        if self.determinism and not self.nondeterministic:
            lines.append(f"deterministic: {self.determinism['tasks']} tasks baked again in a fresh process, "
                         "every byte the same")
        for stage in dict.fromkeys(o.stage for o in self.tasks):
            measured = [(o, flatten_metrics(o.metrics)) for o in self.tasks if o.stage == stage and o.metrics]
            if not measured:
                continue
            names = [k for k in dict.fromkeys(k for _, m in measured for k in m)
                     if any(m.get(k) is not None for _, m in measured)]  # a metric never measured is no column
            head = [(labels or metric_label)(measured[0][0], k) for k in names]
            lines.append("")
            lines.extend(_align([(stage, *head)] + [(o.asset, *(_fmt(m[k]) if m.get(k) is not None else "-"
                                                               for k in names)) for o, m in measured], right_from=1))
        return "\n".join(line.rstrip() for line in lines)


def metric_label(o: TaskOutcome, name: str) -> str:
    """A metric's readable name from its stage's ``metric_docs``; the name itself for a
    stage this process does not know."""
    from bakery.reporting import describe_metric
    from bakery.stages import get_stage

    try:
        docs = get_stage(o.stage_type).metric_docs if o.stage_type else {}
    except Exception:  # noqa: BLE001 - a plugin stage not imported here
        docs = {}
    return describe_metric(name, docs)[0] if docs else name


def verdict_line(v: dict) -> str:
    """``-2.30 dB under BCn at equal bytes (22.1 vs 24.4 set PSNR (dB)); CPU budget: ...``"""
    from bakery.verdict import Verdict

    verdict = Verdict.from_dict(v)
    return verdict.summary() + (f"; {verdict.reason}" if verdict.reason and not verdict.wins else "")




def _align(rows: list[tuple], *, last_free: bool = False, right_from: int | None = None) -> list[str]:
    """Rows as columns padded to a common width, a dashed rule under the header; numbers
    (columns from ``right_from``) right-aligned; ``last_free`` leaves the last column unpadded."""
    n = len(rows[0]) - (1 if last_free else 0)
    widths = [max(len(str(r[i])) for r in rows) for i in range(n)]

    def cell(i, c):
        if i >= n:
            return str(c)
        return str(c).rjust(widths[i]) if right_from is not None and i >= right_from else str(c).ljust(widths[i])

    lines = ["  ".join(cell(i, c) for i, c in enumerate(r)) for r in rows]
    rule = ["-" * w for w in widths] + (["-" * 6] if last_free else [])
    lines.insert(1, "  ".join(rule))
    return lines


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
