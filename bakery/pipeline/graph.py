"""The bake DAG: stages ordered by their ``stage:`` inputs, expanded into (stage, asset) tasks.

A stage over an asset glob yields one task per asset; a stage whose input is another
stage yields one task per upstream task, reading that task's output bundle. Order is
deterministic (declaration order among independent stages, then asset name), so two
bakes of one pipeline run tasks in the same order.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from bakery.errors import UsageError
from bakery.pipeline.config import STAGE_REF, Pipeline, StageDecl


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle as ``[a, b, ..., a]`` (in declaration order), or None."""
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in deps.get(n, ()):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in deps:
        if n not in state:
            found = visit(n)
            if found:
                # report the cycle from its first declared stage, walking dependant -> dependency
                return found
    return None


def stage_order(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Topological order (dependencies first), stable in declaration order."""
    done: list[str] = []
    placed: set[str] = set()
    pending = list(deps)
    while pending:
        progressed = False
        for n in list(pending):
            if all(d in placed for d in deps[n]):
                done.append(n)
                placed.add(n)
                pending.remove(n)
                progressed = True
        if not progressed:
            raise UsageError("dependency cycle: " + " -> ".join(find_cycle(deps) or pending))
    return done


@dataclass
class Task:
    """One unit of work: ``stage`` over ``asset``; ``deps`` are upstream task ids."""

    stage: StageDecl
    asset: str
    files: dict[str, Path]
    upstream: "Task | None" = None
    deps: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.stage.name}/{self.asset}"

    def out_dir(self, out_root: Path) -> Path:
        return out_root / self.stage.name / self.asset


def build_tasks(pipe: Pipeline) -> list[Task]:
    """Every task of the pipeline in execution order."""
    order = stage_order({n: s.upstream for n, s in pipe.stages.items()})
    by_stage: dict[str, list[Task]] = {}
    tasks: list[Task] = []
    for name in order:
        st = pipe.stages[name]
        mine: dict[str, Task] = {}
        for inp in st.inputs:
            if inp.startswith(STAGE_REF):
                new = [Task(st, t.asset, t.files, upstream=t, deps=[t.id])
                       for t in by_stage[inp[len(STAGE_REF):]]]
            else:
                # A material folder may hold files this stage does not read (masks, notes):
                # the stage sees only its roles, and only they feed the cache key.
                accepted = set(st.stage_cls.input_roles)
                # A role "fit.shader" belongs to "fit" (files a fit spec reads).
                new = [Task(st, a.name, {r: p for r, p in a.files.items() if r.split(".")[0] in accepted})
                       for a in pipe.assets[inp]]
            for t in new:
                if t.asset in mine:
                    raise UsageError(f"asset {t.asset!r} reaches this stage twice; list it once",
                                     where=pipe.where(f"stages.{name}.inputs"), key=f"stages.{name}.inputs")
                mine[t.asset] = t
        by_stage[name] = sorted(mine.values(), key=lambda t: t.asset)
        tasks.extend(by_stage[name])
    return tasks


def with_upstream(tasks: Sequence[Task], chosen: Iterable[str]) -> set[str]:
    """``chosen`` task ids plus every task they need (a build tool builds what it reads)."""
    by_id = {t.id: t for t in tasks}
    keep: set[str] = set()
    todo = list(chosen)
    while todo:
        tid = todo.pop()
        if tid in keep:
            continue
        keep.add(tid)
        todo.extend(by_id[tid].deps)
    return keep


def with_downstream(tasks: Sequence[Task], chosen: Iterable[str]) -> set[str]:
    """``chosen`` task ids plus every task that reads their outputs, transitively."""
    keep = set(chosen)
    for t in tasks:  # execution order: dependencies come first
        if any(d in keep for d in t.deps):
            keep.add(t.id)
    return keep


def select_tasks(pipe: Pipeline, tasks: Sequence[Task], *, only: Sequence[str] = (),
                 assets: Sequence[str] = (), changed: Sequence[Path] | None = None) -> list[Task]:
    """Applies ``--only STAGE``, ``--asset GLOB`` and ``--changed FILE`` (in that order of
    narrowing); upstream tasks of what is selected are kept so inputs exist."""
    for s in only:
        if s not in pipe.stages:
            raise UsageError(f"unknown stage {s!r} (stages: {', '.join(pipe.stages)})", key="--only")
    chosen = [t for t in tasks
              if (not only or t.stage.name in only)
              and (not assets or any(fnmatch.fnmatchcase(t.asset, g) for g in assets))]
    if changed is not None:
        changed_set = {Path(p).resolve() for p in changed}
        if pipe.path.resolve() in changed_set:
            fed = {t.id for t in tasks}  # the pipeline itself changed: everything may have
        else:
            fed = with_downstream(tasks, [t.id for t in tasks if changed_set & set(t.files.values())
                                          and t.upstream is None])
        chosen = [t for t in chosen if t.id in fed]
    keep = with_upstream(tasks, [t.id for t in chosen])
    return [t for t in tasks if t.id in keep]
