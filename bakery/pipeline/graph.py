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
from typing import Iterable, Sequence

from bakery.errors import UsageError, did_you_mean
from bakery.materials import binding_role
from bakery.pipeline.config import STAGE_REF, Pipeline, StageDecl
from bakery.pipeline.dag import stage_order
from bakery.pipeline.safety import check_asset_globs


@dataclass
class TaskInput:
    """One input of a task: an asset's files by role, or the bundle of upstream task ``upstream``."""

    name: str
    files: dict[str, Path] = field(default_factory=dict)
    upstream: str | None = None


@dataclass
class Task:
    """One unit of work: ``stage`` over ``asset``; ``deps`` are upstream task ids."""

    stage: StageDecl
    asset: str
    inputs: list[TaskInput]
    deps: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.stage.name}/{self.asset}"

    @property
    def files(self) -> dict[str, Path]:
        """The source files this task reads directly (not through an upstream bundle)."""
        return {r: p for i in self.inputs for r, p in i.files.items()}

    def out_dir(self, out_root: Path) -> Path:
        return out_root / self.stage.name / self.asset


def _input_tasks(pipe: Pipeline, st: StageDecl, inp: str, by_stage: dict[str, list[Task]]) -> dict[str, TaskInput]:
    """asset name -> what one declared input of ``st`` gives for that asset."""
    if inp.startswith(STAGE_REF):
        return {t.asset: TaskInput(t.asset, upstream=t.id) for t in by_stage[inp[len(STAGE_REF):]]}
    # A material folder may hold files this stage does not read (masks, notes): the
    # stage sees only its roles (a key may carry a channel selection: "roughness.g"), and only they feed the cache key, with the files those
    # refer to (a fit spec's shader and images: Stage.referenced_files).
    cls = st.stage_cls
    tasks = {}
    for a in pipe.assets[inp]:
        own = {r: p for r, p in a.files.items() if binding_role(r) in cls.input_roles}
        tasks[a.name] = TaskInput(a.name, {**own, **cls.referenced_files(own)})
    return tasks


def _task(st: StageDecl, asset: str, inputs: list[TaskInput]) -> Task:
    return Task(st, asset, inputs, deps=[i.upstream for i in inputs if i.upstream])


def build_tasks(pipe: Pipeline) -> list[Task]:
    """Every task of the pipeline in execution order.

    A stage's inputs are a union (one task per asset of each input) unless the stage
    joins them (``Stage.joins_inputs``): then each task gets one input from each declared
    input, matched by asset name, and every input must hold the same assets.
    """
    order = stage_order({n: s.upstream for n, s in pipe.stages.items()})
    by_stage: dict[str, list[Task]] = {}
    tasks: list[Task] = []
    for name in order:
        st = pipe.stages[name]
        key = f"stages.{name}.inputs"
        per_input = [_input_tasks(pipe, st, inp, by_stage) for inp in st.inputs]
        mine: dict[str, Task] = {}
        if getattr(st.stage_cls, "joins_inputs", False) and len(per_input) > 1:
            names = set(per_input[0])
            for inp, got in zip(st.inputs, per_input):
                if set(got) != names:
                    odd = sorted(set(got) ^ names)[0]
                    raise UsageError(f"joined inputs must hold the same assets; {odd!r} is not in all of them "
                                     f"(see {inp!r})", where=pipe.where(key), key=key)
            mine = {a: _task(st, a, [got[a] for got in per_input]) for a in names}
        else:
            for got in per_input:
                for asset, ti in got.items():
                    if asset in mine:
                        raise UsageError(f"asset {asset!r} reaches this stage twice; list it once",
                                         where=pipe.where(key), key=key)
                    mine[asset] = _task(st, asset, [ti])
        by_stage[name] = sorted(mine.values(), key=lambda t: t.asset)
        tasks.extend(by_stage[name])
    return tasks


def source_files(tasks: Iterable[Task]) -> set[Path]:
    """Every source file some task reads (what ``--changed`` can name)."""
    return {p for t in tasks for p in t.files.values()}


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
            raise UsageError(f"unknown stage {s!r}{did_you_mean(s, pipe.stages)} (stages: {', '.join(pipe.stages)})",
                             key="--only")
    check_asset_globs((t.asset for t in tasks), assets)
    chosen = [t for t in tasks
              if (not only or t.stage.name in only)
              and (not assets or any(fnmatch.fnmatchcase(t.asset, g) for g in assets))]
    if changed is not None:
        changed_set = {Path(p).resolve() for p in changed}
        if pipe.path.resolve() in changed_set:
            fed = {t.id for t in tasks}  # the pipeline itself changed: everything may have
        else:
            fed = with_downstream(tasks, [t.id for t in tasks if changed_set & set(t.files.values())])
        chosen = [t for t in chosen if t.id in fed]
    keep = with_upstream(tasks, [t.id for t in chosen])
    return [t for t in tasks if t.id in keep]
