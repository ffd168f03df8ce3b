"""Pure graph algorithms over ``{node: [dependencies]}`` maps: cycle finding and a
stable topological order. No pipeline types here, so configuration and planning can both
use them without importing each other."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from bakery.errors import UsageError


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


def critical_path_first(deps: Mapping[str, Sequence[str]], cost: Callable[[str], float]) -> list[str]:
    """The nodes by the longest chain of ``cost`` they start, longest first (ties in
    declaration order): a scheduler that hands out ready nodes in this order starts the
    long chains early, so a slow task started last does not set the wall time. Each
    node's chain is its own cost plus the longest among the nodes that depend on it;
    dependencies outside ``deps`` are ignored."""
    dependants: dict[str, list[str]] = {n: [] for n in deps}
    for n, ds in deps.items():
        for d in ds:
            if d in dependants:
                dependants[d].append(n)
    # Kahn's order from the sinks up: a node's chain once all its dependants' are known.
    left = {n: len(dependants[n]) for n in deps}
    ready = [n for n in deps if not left[n]]
    chain: dict[str, float] = {}
    while ready:
        n = ready.pop()
        chain[n] = cost(n) + max((chain[m] for m in dependants[n]), default=0.0)
        for d in deps[n]:
            if d in left:
                left[d] -= 1
                if not left[d]:
                    ready.append(d)
    if len(chain) < len(deps):
        raise UsageError("dependency cycle: " + " -> ".join(find_cycle(deps) or []))
    position = {n: i for i, n in enumerate(deps)}
    return sorted(deps, key=lambda n: (-chain[n], position[n]))
