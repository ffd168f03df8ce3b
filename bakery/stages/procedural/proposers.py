"""Where candidate structures come from.

A proposer returns programs (trees, with or without parameters) for the search to fit and
score. The built-in one starts from every primitive under a colour ramp and then mutates
the best programs found so far (swap a leaf, wrap in a transform or threshold, combine
with a second field, change ramp stops or fBm octaves, unwrap); children inherit their
parent's fitted parameters. ``cmd:...`` runs an external command (a language model, a
user's library): it reads a JSON request on stdin and prints programs as JSON.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Sequence

import numpy as np

from bakery.errors import UsageError
from bakery.stages.procedural import bytecode
from bakery.stages.procedural.dsl import (COLOUR, FIELD, OPS, Node, ProgramError, complexity, from_json, instructions,
                                          node_type, program_document)

#: Field primitives (leaves), in the order generation 0 tries them.
LEAVES = ("linear_gradient", "radial_gradient", "stripes_sine", "stripes_saw", "stripes_triangle", "checker",
          "bricks", "value_noise", "gradient_noise", "fbm", "worley")
#: Domain transforms a field can be wrapped in.
WRAPS = ("warp_sine", "warp_triangle", "warp", "polar")
#: A fitted cell layout's per-cell variation: the same cells, hashed (stochastic materials).
CELLS = {"bricks": ("brick_cells", ("count", "offset")), "worley": ("worley_cells", ("frequency", "jitter", "offset"))}


#: Edits that share one turn of the proposer's round-robin.
COMBINE = {"add": "combine", "multiply": "combine"}


def leaf(op: str) -> Node:
    return Node(op, (), tuple((k, v[0]) for k, v in OPS[op].attrs.items()), ())


def ramp(child: Node, stops: int = 2) -> Node:
    return Node("ramp", (child,), (("stops", stops),), ())


def _paths(node: Node, path=()):
    yield path, node
    for i, c in enumerate(node.inputs):
        yield from _paths(c, path + (i,))


def _replace_at(node: Node, path: tuple, new: Node) -> Node:
    if not path:
        return new
    inputs = list(node.inputs)
    inputs[path[0]] = _replace_at(inputs[path[0]], path[1:], new)
    return node.replace(inputs=tuple(inputs))


def mutations(program: Node) -> list[Node]:
    """Every one-step structural edit of ``program`` the built-in proposer knows
    (parameters of untouched nodes are kept)."""
    return [n for _, n in labelled_mutations(program)]


def labelled_mutations(program: Node) -> list[tuple[str, Node]]:
    """The same edits, each with its kind (swap, threshold, wrap, cells, add, multiply,
    unwrap, stops, octaves, mix): the proposer takes the simplest of every kind first."""
    out: list[tuple[str, Node]] = []
    for path, n in _paths(program):
        t = node_type(n)
        if t == FIELD:
            if not n.inputs:  # swap a leaf for another primitive
                out += [("swap", _replace_at(program, path, leaf(op))) for op in LEAVES if op != n.op]
            out.append(("threshold", _replace_at(program, path, Node("threshold", (n,), (), ()))))
            for wrap in WRAPS:
                if n.op != wrap:
                    out.append(("wrap", _replace_at(program, path, Node(wrap, (n,), (), ()))))
            if n.op in CELLS and n.params:  # vary each cell: add its hashed id, same layout
                op, shared = CELLS[n.op]
                given = n.param
                params = tuple((p.name, given[p.name] if p.name in shared else (0.3,)) for p in OPS[op].params)
                out.append(("cells", _replace_at(program, path, Node("add", (n, Node(op, (), (), params)), (), ()))))
            for comb in ("add", "multiply"):
                out += [(comb, _replace_at(program, path, Node(comb, (n, leaf(op)), (), ()))) for op in LEAVES]
        if n.op in ("threshold",) + WRAPS and node_type(n.inputs[0]) == t:
            out.append(("unwrap", _replace_at(program, path, n.inputs[0])))
        if n.op in ("add", "multiply"):
            out += [("unwrap", _replace_at(program, path, c)) for c in n.inputs]
        if n.op == "ramp":
            stops = n.attr["stops"]
            for s in (stops - 1, stops + 1):
                if 2 <= s <= 4:
                    out.append(("stops", _replace_at(program, path, Node("ramp", n.inputs, (("stops", s),), ()))))
        if n.op == "fbm":
            a = n.attr
            for o in (a["octaves"] - 1, a["octaves"] + 1):
                if 1 <= o <= 8:
                    out.append(("octaves", _replace_at(program, path,
                                                       n.replace(attrs=(("octaves", o), ("basis", a["basis"]))))))
            other = "value" if a["basis"] == "gradient" else "gradient"
            out.append(("octaves", _replace_at(program, path,
                                               n.replace(attrs=(("octaves", a["octaves"]), ("basis", other))))))
    if node_type(program) == COLOUR:
        out += [("mix", Node("mix", (leaf(op), program, Node("constant", (), (), ())), (), ()))
                for op in ("checker", "bricks", "stripes_sine", "fbm", "worley")]
    return out


class BuiltinProposer:
    name = "builtin"

    def initial(self) -> list[Node]:
        return [ramp(leaf(op)) for op in LEAVES]

    def propose(self, beam: Sequence[Node], rng: np.random.Generator, limit: int, seen=frozenset()) -> list[Node]:
        """Unseen children of the beam's programs, an equal share per parent (best parent
        first); within a parent the simplest of each kind of edit first, then the next
        of each (node count, then instruction estimate: the score's own prior), ties in
        seeded random order."""
        out, taken = [], set(seen)
        per_parent = max(1, -(-limit // max(1, len(beam))))
        for parent in beam:
            labelled = labelled_mutations(parent)
            kids = [k for _, k in labelled]
            tie = rng.permutation(len(kids))
            # A sum (layers) before a product of the same cost.
            simplest = sorted(range(len(kids)), key=lambda i: (complexity(kids[i]), instructions(kids[i]),
                                                               labelled[i][0] == "multiply", tie[i]))
            # Round-robin over the kinds of edit, each round simplest first: a small share
            # then holds a wrap and a combination, not only the cheapest kind. Sums and
            # products take turns as one kind (combinations).
            rank, seen_kinds = {}, {}
            for i in simplest:
                kind = COMBINE.get(labelled[i][0], labelled[i][0])
                rank[i] = seen_kinds[kind] = seen_kinds.get(kind, -1) + 1
            order = sorted(simplest, key=lambda i: (rank[i], complexity(kids[i]), instructions(kids[i]), tie[i]))
            share = 0
            for i in order:
                k = kids[i].key()
                if k in taken or not bytecode.fits(kids[i]):
                    continue
                taken.add(k)
                out.append(kids[i])
                share += 1
                if share == per_parent:
                    break
        return out[:limit]


class CommandProposer:
    """Runs ``command`` once per generation. stdin: {"generation", "width", "height",
    "mean_colour", "best": [programs], "ops": [names]}; stdout: {"programs": [...]} or a list.
    Each malformed program is skipped with a warning naming the problem."""

    name = "cmd"

    def __init__(self, command: str, log, *, timeout: float = 60.0):
        self.argv = shlex.split(command)
        if not self.argv:
            raise UsageError("empty proposer command", key="params.proposer")
        self.log, self.timeout = log, timeout

    def request(self, generation: int, width: int, height: int, mean_colour, best: Sequence[Node]) -> list[Node]:
        req = {"generation": generation, "width": width, "height": height,
               "mean_colour": [float(x) for x in mean_colour], "ops": list(OPS),
               "best": [program_document(b) for b in best]}
        try:
            proc = run_in_own_group(self.argv, json.dumps(req), self.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.log.warning("proposer %r failed (%s); no programs from it this generation", self.argv[0], e)
            return []
        if proc.returncode != 0:
            self.log.warning("proposer %r exited with %d: %s", self.argv[0], proc.returncode,
                             proc.stderr.strip().splitlines()[-1:] or "")
            return []
        return parse_proposals(proc.stdout, self.log)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when bakery dies, even by SIGKILL (Linux)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_in_own_group(argv: list[str], stdin: str, timeout: float) -> subprocess.CompletedProcess:
    """Runs a command in a process group of its own and kills the whole group (its
    children too: a model server it forked, a shell's pipeline) when it times out, when
    bakery is interrupted or fails, or when bakery dies."""
    import os
    import signal

    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_die_with_parent)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group, whatever happened
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.wait()


def parse_proposals(text: str, log) -> list[Node]:
    """Programs from a proposer's output; malformed ones are skipped with a warning."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        log.warning("proposer output is not JSON (%s); skipped", e)
        return []
    items = doc.get("programs") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        log.warning("proposer output has no 'programs' list; skipped")
        return []
    out = []
    for i, item in enumerate(items):
        try:
            program = from_json(item)
            bytecode.encode(program)  # within the fitting interpreter's limits, on every device alike
            out.append(program)
        except ProgramError as e:
            log.warning("proposer program %d skipped: %s", i, e)
    return out


def make_proposers(spec: str, log) -> tuple[BuiltinProposer, CommandProposer | None]:
    """``builtin`` or ``cmd:COMMAND`` (the built-in proposer always runs as well)."""
    if spec == "builtin":
        return BuiltinProposer(), None
    if spec.startswith("cmd:"):
        return BuiltinProposer(), CommandProposer(spec[4:], log)
    raise UsageError(f"unknown proposer {spec!r} (use 'builtin' or 'cmd:COMMAND')", key="params.proposer")
