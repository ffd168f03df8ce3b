"""Pure graph algorithms over ``{node: [dependencies]}`` maps: cycle finding and a
stable topological order. No pipeline types here, so configuration and planning can both
use them without importing each other."""

from __future__ import annotations

from typing import Mapping, Sequence

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
