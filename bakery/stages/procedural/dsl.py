"""The procedural DSL: a program is a tree of nodes, stored as JSON.

Each node names an operator (a primitive of primitives.slang or a combinator), its
discrete choices (``attrs``: ramp stops, fBm octaves and basis) and its continuous
parameters (``params``, named lists of floats in the units the shader uses). Fields
produce a float, colours a float3; the root is a colour. The search changes structures;
Adam fits the parameters.

    {"op": "ramp", "attrs": {"stops": 2},
     "params": {"positions": [0, 1], "colours": [0.1, 0.1, 0.1, 0.9, 0.8, 0.7]},
     "inputs": [{"op": "checker", "params": {"frequency": [8], ...}}]}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

FORMAT = "bakery-procedural"
VERSION = 2  # 2: anti-aliased edges (no sharpness), sine/triangle warps, cell variation, tiling
FIELD, COLOUR, SAME = "field", "colour", "same"


class ProgramError(ValueError):
    """A program that does not follow the DSL; the message names the node path."""


#: How the refinement snaps a parameter to a value a person would write (search.py):
#: INTEGER (frequencies, counts: whole numbers, and forced when the target tiles),
#: RATIONAL (offsets, phases, levels: the simplest fraction within reach), COLOUR (a
#: palette step), or None (left as fitted).
INTEGER, RATIONAL, COLOUR_STEP = "integer", "rational", "colour"


@dataclass(frozen=True)
class ParamSpec:
    """One named parameter: ``size`` floats; the optimiser sees value / ``scale``."""

    name: str
    size: int | Callable[[Mapping], int]
    scale: float = 1.0
    snap: str | None = RATIONAL

    def count(self, attrs: Mapping) -> int:
        return self.size(attrs) if callable(self.size) else self.size


@dataclass(frozen=True)
class OpSpec:
    name: str
    out: str                        # FIELD, COLOUR, or SAME (the type of its inputs)
    inputs: tuple[str, ...] = ()    # FIELD, COLOUR, or SAME (any type, all alike)
    params: tuple[ParamSpec, ...] = ()
    attrs: Mapping[str, tuple] = field(default_factory=dict)  # name -> allowed values (first = default)
    transform: bool = False         # evaluates its one input at transformed uv
    cost: Callable[[Mapping], int] | int = 1  # instruction estimate (ALU ops, rough)
    periodic: bool = True           # tiles over [0, 1]^2 once its INTEGER parameters are whole

    def param_count(self, attrs: Mapping) -> int:
        return sum(p.count(attrs) for p in self.params)


def _stops(attrs) -> int:
    return int(attrs["stops"])


def _p(name, size, scale=1.0, snap=RATIONAL) -> ParamSpec:
    return ParamSpec(name, size, scale, snap)


OPS: dict[str, OpSpec] = {o.name: o for o in (
    OpSpec("linear_gradient", FIELD, params=(_p("k", 2), _p("offset", 1)), cost=3, periodic=False),
    OpSpec("radial_gradient", FIELD, params=(_p("center", 2), _p("scale", 1), _p("offset", 1)), cost=8,
           periodic=False),
    OpSpec("stripes_sine", FIELD, params=(_p("k", 2, snap=INTEGER), _p("phase", 1)), cost=9),
    OpSpec("stripes_saw", FIELD, params=(_p("k", 2, snap=INTEGER), _p("phase", 1)), cost=5),
    OpSpec("stripes_triangle", FIELD, params=(_p("k", 2, snap=INTEGER), _p("phase", 1)), cost=6),
    OpSpec("checker", FIELD, params=(_p("frequency", 1, snap=INTEGER), _p("offset", 2)), cost=24),
    OpSpec("bricks", FIELD, params=(_p("count", 2, snap=INTEGER), _p("offset", 2), _p("mortar", 1, 0.01)), cost=30),
    OpSpec("brick_cells", FIELD, params=(_p("count", 2, snap=INTEGER), _p("offset", 2), _p("amount", 1)), cost=30),
    OpSpec("value_noise", FIELD, params=(_p("frequency", 1, 4.0, INTEGER), _p("offset", 2)), cost=30),
    OpSpec("gradient_noise", FIELD, params=(_p("frequency", 1, 4.0, INTEGER), _p("offset", 2)), cost=45),
    OpSpec("fbm", FIELD, params=(_p("frequency", 1, 4.0, INTEGER), _p("gain", 1), _p("offset", 2)),
           attrs={"octaves": (4, 1, 2, 3, 5, 6, 7, 8), "basis": ("gradient", "value")},
           cost=lambda a: 8 + int(a["octaves"]) * (50 if a["basis"] == "gradient" else 35)),
    OpSpec("worley", FIELD, params=(_p("frequency", 1, 4.0, INTEGER), _p("jitter", 1), _p("offset", 2)),
           cost=190),
    OpSpec("worley_cells", FIELD, params=(_p("frequency", 1, 4.0, INTEGER), _p("jitter", 1), _p("offset", 2),
                                          _p("amount", 1)), cost=200),
    OpSpec("polar", SAME, (SAME,), params=(_p("center", 2), _p("scale", 1)), transform=True, cost=25, periodic=False),
    OpSpec("warp", SAME, (SAME,), params=(_p("frequency", 1, 4.0, INTEGER), _p("amplitude", 1, 0.1),
                                          _p("offset", 2)), transform=True, cost=100),
    OpSpec("warp_sine", SAME, (SAME,), params=(_p("k", 2, snap=INTEGER), _p("amplitude", 2, 0.1), _p("phase", 1)),
           transform=True, cost=10),
    OpSpec("warp_triangle", SAME, (SAME,), params=(_p("k", 2, snap=INTEGER), _p("amplitude", 2, 0.1),
                                                   _p("phase", 1)), transform=True, cost=12),
    OpSpec("threshold", FIELD, (FIELD,), params=(_p("level", 1),), cost=10),
    OpSpec("add", SAME, (SAME, SAME), cost=1),
    OpSpec("multiply", SAME, (SAME, SAME), cost=1),
    OpSpec("ramp", COLOUR, (FIELD,), params=(_p("positions", _stops),
                                             _p("colours", lambda a: 3 * _stops(a), snap=COLOUR_STEP)),
           attrs={"stops": (2, 3, 4)}, cost=lambda a: 2 + 9 * (int(a["stops"]) - 1)),
    OpSpec("mix", COLOUR, (FIELD, COLOUR, COLOUR), cost=6),
    OpSpec("constant", COLOUR, params=(_p("colour", 3, snap=COLOUR_STEP),), cost=0),
)}


@dataclass(frozen=True)
class Node:
    """One node of a program; ``params`` maps names to tuples of floats (or is empty
    for a structure whose parameters are still to be fitted)."""

    op: str
    inputs: tuple["Node", ...] = ()
    attrs: tuple[tuple[str, object], ...] = ()
    params: tuple[tuple[str, tuple[float, ...]], ...] = ()

    @property
    def spec(self) -> OpSpec:
        return OPS[self.op]

    @property
    def attr(self) -> dict:
        return dict(self.attrs)

    @property
    def param(self) -> dict:
        return dict(self.params)

    def children(self):
        return self.inputs

    def walk(self):
        """Nodes in pre-order (the order parameters are laid out in)."""
        yield self
        for c in self.inputs:
            yield from c.walk()

    def structure(self) -> "Node":
        """The same tree without parameters."""
        return Node(self.op, tuple(c.structure() for c in self.inputs), self.attrs, ())

    def key(self) -> str:
        """Canonical text of the structure (what the search deduplicates on)."""
        return json.dumps(to_json(self.structure()), sort_keys=True, separators=(",", ":"))

    def replace(self, **kw) -> "Node":
        d = dict(op=self.op, inputs=self.inputs, attrs=self.attrs, params=self.params)
        d.update(kw)
        return Node(**d)


def node_type(node: Node) -> str:
    out = node.spec.out
    return node_type(node.inputs[0]) if out == SAME else out


def complexity(node: Node) -> int:
    """The search's complexity measure: the node count."""
    return sum(1 for _ in node.walk())


def instructions(node: Node) -> int:
    """A rough instruction estimate of one evaluation (reported beside the node count)."""
    total = 0
    for n in node.walk():
        c = n.spec.cost
        total += c(n.attr) if callable(c) else c
    return total


def param_count(node: Node) -> int:
    return sum(n.spec.param_count(n.attr) for n in node.walk())


# -- parameter vectors ------------------------------------------------------------------
def param_snaps(node: Node) -> list[str | None]:
    """Per-slot snap kind (ParamSpec.snap), in layout order."""
    return [p.snap for n in node.walk() for p in n.spec.params for _ in range(p.count(n.attr))]


def periodic(node: Node) -> bool:
    """Whether the program can tile (every op periodic once its integers are whole)."""
    return all(n.spec.periodic for n in node.walk())


def param_scales(node: Node) -> np.ndarray:
    """Per-slot scale: the optimiser works on value / scale (all slots near unit size)."""
    out = []
    for n in node.walk():
        for p in n.spec.params:
            out += [p.scale] * p.count(n.attr)
    return np.asarray(out, np.float64)


def flatten(node: Node) -> np.ndarray:
    """The parameters in layout order (shader units); every node must carry them."""
    out = []
    for n in node.walk():
        given = n.param
        for p in n.spec.params:
            out += list(given[p.name])
    return np.asarray(out, np.float64)


def with_params(node: Node, values: Sequence[float]) -> Node:
    """The structure of ``node`` with parameters taken in layout order from ``values``."""
    it = iter([float(v) for v in values])

    def rebuild(n: Node) -> Node:
        params = tuple((p.name, tuple(next(it) for _ in range(p.count(n.attr)))) for p in n.spec.params)
        return Node(n.op, tuple(rebuild(c) for c in n.inputs), n.attrs, params)

    return rebuild(node)


def has_params(node: Node) -> bool:
    return all(len(n.params) == len(n.spec.params) for n in node.walk())


# -- JSON --------------------------------------------------------------------------------
def _round(v: float) -> float:
    """Shortest float32-exact text: the JSON file and the emitted shader agree bit for bit."""
    return float(np.format_float_positional(np.float32(v), unique=True, trim="-"))


def to_json(node: Node) -> dict:
    d: dict = {"op": node.op}
    if node.attrs:
        d["attrs"] = dict(node.attrs)
    if node.params:
        d["params"] = {k: [_round(x) for x in v] for k, v in node.params}
    if node.inputs:
        d["inputs"] = [to_json(c) for c in node.inputs]
    return d


def program_document(node: Node, *, tile: bool = False) -> dict:
    """The stored program; ``tile`` says its noise lattices wrap (the program tiles)."""
    return {"format": FORMAT, "version": VERSION, "tile": bool(tile), "root": to_json(node)}


def document_tiles(doc: Mapping) -> bool:
    return bool(doc.get("tile", False))


def from_json(obj, *, require_params: bool = False) -> Node:
    """Parses and checks one program (a node dict or a whole document).

    Raises :class:`ProgramError` naming the path of the first problem.
    """
    if isinstance(obj, Mapping) and "root" in obj:
        if obj.get("format", FORMAT) != FORMAT:
            raise ProgramError(f"format is {obj.get('format')!r}, expected {FORMAT!r}")
        if obj.get("version", VERSION) != VERSION:
            raise ProgramError(f"version is {obj.get('version')!r}; this bakery reads version {VERSION} "
                               f"(bake the texture again)")
        obj = obj["root"]
    node = _parse(obj, "root", require_params)
    if node_type(node) != COLOUR:
        raise ProgramError("root: the program must produce a colour (ramp, mix, constant, or add/multiply of colours)")
    return node


def _parse(obj, path: str, require_params: bool) -> Node:
    if not isinstance(obj, Mapping):
        raise ProgramError(f"{path}: expected an object, got {type(obj).__name__}")
    unknown = set(obj) - {"op", "attrs", "params", "inputs"}
    if unknown:
        raise ProgramError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    op = obj.get("op")
    if op not in OPS:
        raise ProgramError(f"{path}: unknown op {op!r} (known: {', '.join(OPS)})")
    spec = OPS[op]
    attrs_in = obj.get("attrs", {})
    if not isinstance(attrs_in, Mapping):
        raise ProgramError(f"{path}.attrs: expected an object")
    for k in attrs_in:
        if k not in spec.attrs:
            raise ProgramError(f"{path}.attrs.{k}: {op} has no such attribute")
    attrs = []
    for k, allowed in spec.attrs.items():
        v = attrs_in.get(k, allowed[0])
        if v not in allowed:
            raise ProgramError(f"{path}.attrs.{k}: {v!r} not in {list(allowed)}")
        attrs.append((k, v))
    attr_map = dict(attrs)
    inputs_in = obj.get("inputs", [])
    if not isinstance(inputs_in, list) or len(inputs_in) != len(spec.inputs):
        raise ProgramError(f"{path}.inputs: {op} takes {len(spec.inputs)} input(s)")
    inputs = tuple(_parse(c, f"{path}.inputs[{i}]", require_params) for i, c in enumerate(inputs_in))
    types = [node_type(c) for c in inputs]
    for i, (want, got) in enumerate(zip(spec.inputs, types)):
        if want != SAME and want != got:
            raise ProgramError(f"{path}.inputs[{i}]: {op} needs a {want}, got a {got}")
    if spec.inputs.count(SAME) > 1 and len(set(t for w, t in zip(spec.inputs, types) if w == SAME)) > 1:
        raise ProgramError(f"{path}.inputs: {op} needs inputs of one type, got {', '.join(types)}")
    params_in = obj.get("params")
    params = ()
    if params_in is not None:
        if not isinstance(params_in, Mapping):
            raise ProgramError(f"{path}.params: expected an object")
        names = [p.name for p in spec.params]
        for k in params_in:
            if k not in names:
                raise ProgramError(f"{path}.params.{k}: {op} has no such parameter (known: {', '.join(names) or 'none'})")
        out = []
        for p in spec.params:
            if p.name not in params_in:
                raise ProgramError(f"{path}.params.{p.name}: missing")
            v = params_in[p.name]
            v = [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else v
            n = p.count(attr_map)
            if (not isinstance(v, list) or len(v) != n
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)):
                raise ProgramError(f"{path}.params.{p.name}: expected {n} finite number(s)")
            out.append((p.name, tuple(float(x) for x in v)))
        params = tuple(out)
    elif require_params and spec.params:
        raise ProgramError(f"{path}.params: missing")
    return Node(op, inputs, tuple(attrs), params)
