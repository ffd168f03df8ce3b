"""What a bake did, for machines (bake-report.json) and for people (the summary table)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import bakery

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
        }

    def write(self, path: Path) -> None:
        """Atomic write, so a reader never sees half a report."""
        from bakery.formats.publish import write_atomic

        write_atomic(Path(path), (json.dumps(self.to_dict(), indent=1) + "\n").encode())

    def table(self) -> str:
        """The human summary: one row per task, then totals."""
        rows = [("stage", "asset", "status", "seconds", "detail")]
        for o in self.tasks:
            detail = o.error or o.reason
            if o.metrics and o.status == "built":
                shown = ", ".join(f"{k}={_fmt(v)}" for k, v in list(o.metrics.items())[:3])
                detail = f"{detail}; {shown}" if detail else shown
            rows.append((o.stage, o.asset, o.status, f"{o.seconds:.2f}", detail))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 6)
        t = self.totals()
        verb, n = ("would build", t.get("would-build", 0)) if self.dry_run else ("built", t["built"])
        lines.append(f"{t['total']} tasks: {n} {verb}, {t['cached']} cached, "
                     f"{t['failed']} failed, {t['skipped']} skipped in {self.seconds:.2f} s")
        return "\n".join(line.rstrip() for line in lines)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
