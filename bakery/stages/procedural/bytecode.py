"""A program structure as instructions for the fitting interpreter (interpreter.slang).

The search fits hundreds of structures per target. Compiling each into its own kernel
cost most of a search's time on the GPU (every generation brought new structures, and
the driver's compile time of a differentiated switch grows faster than its size); one
interpreter compiled once per device runs them all, a structure being a few uint4s.

The instructions are the statements codegen._emit writes for the shipped shader, in
the same order, so the fit and the shipped code compute the same thing: each writes
one new register (float4: a field in x, a colour in xyz, coordinates as uv in xy and
their pixel footprint in zw). Register 0 holds the pixel's coordinates. A transform
writes new coordinates; a threshold reads its input's subtree evaluated at the pixel
and at its two neighbours (SHIFT_X / SHIFT_Y coordinates), as the shader does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bakery.stages.procedural.codegen import slot_layout
from bakery.stages.procedural.dsl import FIELD, Node, ProgramError, node_type, param_scales

#: Opcodes, as interpreter.slang numbers them (BK_OP_*).
OPCODES = {name: i for i, name in enumerate((
    "linear_gradient", "radial_gradient", "stripes_sine", "stripes_saw", "stripes_triangle", "checker", "bricks",
    "brick_cells", "value_noise", "gradient_noise", "fbm", "worley", "worley_cells", "polar", "warp", "warp_sine",
    "warp_triangle", "threshold", "add", "multiply", "ramp", "mix", "constant", "shift_x", "shift_y"))}
#: Limits the interpreter is compiled with (interpreter.slang): instructions (and so
#: registers) per structure, parameter slots per structure, slots per instruction.
MAX_INSTRUCTIONS = 96
MAX_PARAMS = 128
MAX_OP_PARAMS = 16
#: The attr bit of an op whose lattice wraps (the target tiles): the period comes from its
#: first slot (frequency or count), as codegen's ``period``.
WRAPS = 0x10000
#: Where an instruction's attr keeps its own slot count (bits 24..31): the interpreter
#: gathers and differentiates those slots alone, not all MAX_OP_PARAMS.
SLOTS_SHIFT = 24
PERIODIC_SLOT0 = {"bricks", "brick_cells", "value_noise", "gradient_noise", "fbm", "worley", "worley_cells", "warp"}


@dataclass(frozen=True)
class Bytecode:
    """One structure's instructions: [n, 8] uint32 rows (op, dst, a, b, c, coords,
    first slot, attr) and the register holding the colour."""

    code: np.ndarray
    result: int


def encode(node: Node, *, tile: bool = False) -> Bytecode:
    """The instructions of ``node``'s structure (parameters, if any, are ignored: slots
    are laid out as dsl.flatten lays them); ``tile``: the noise lattices wrap. Raises
    ProgramError when the structure does not fit the interpreter's limits."""
    slots = slot_layout(node)
    total = sum(len(idx) for per in slots.values() for idx in per.values())
    if total > MAX_PARAMS:
        raise ProgramError(f"root: {total} parameters; the fitting interpreter takes at most {MAX_PARAMS}")
    rows: list[tuple[int, ...]] = []

    def emit(op: str, a: int = 0, b: int = 0, c: int = 0, coords: int = 0, first: int = 0, attr: int = 0,
             count: int = 0) -> int:
        if len(rows) >= MAX_INSTRUCTIONS:
            raise ProgramError(f"root: more than {MAX_INSTRUCTIONS} instructions (nested thresholds repeat their "
                               f"input); the fitting interpreter takes at most {MAX_INSTRUCTIONS}")
        rows.append((OPCODES[op], len(rows) + 1, a, b, c, coords, first, attr | count << SLOTS_SHIFT))
        return len(rows)

    def walk(n: Node, path: tuple, coords: int) -> int:
        mine = slots[path]
        first = min((idx[0] for idx in mine.values() if idx), default=0)
        count = sum(len(idx) for idx in mine.values())
        if count > MAX_OP_PARAMS:
            raise ProgramError(f"root: {n.op} has {count} parameters; the interpreter takes {MAX_OP_PARAMS} per node")
        if n.spec.transform:
            wraps = WRAPS if tile and n.op in PERIODIC_SLOT0 else 0
            return walk(n.inputs[0], path + (0,), emit(n.op, coords=coords, first=first, attr=wraps,
                                                              count=count))
        if n.op == "threshold":
            v = walk(n.inputs[0], path + (0,), coords)
            vx = walk(n.inputs[0], path + (0,), emit("shift_x", coords=coords))
            vy = walk(n.inputs[0], path + (0,), emit("shift_y", coords=coords))
            return emit("threshold", v, vx, vy, coords, first, count=count)
        ins = [walk(c, path + (i,), coords) for i, c in enumerate(n.inputs)] + [0, 0, 0]
        attr = 0
        if n.op == "ramp":
            attr = int(n.attr["stops"])
        elif n.op == "fbm":
            attr = int(n.attr["octaves"]) | (256 if n.attr["basis"] == "gradient" else 0)
        elif n.op in ("add", "multiply") and node_type(n) != FIELD:
            attr = 1
        if tile and n.op in PERIODIC_SLOT0:
            attr |= WRAPS
        return emit(n.op, ins[0], ins[1], ins[2], coords, first, attr, count)

    result = walk(node, (), 0)
    return Bytecode(np.asarray(rows, np.uint32).reshape(-1, 8), result)


def fits(node: Node) -> bool:
    """Whether a structure fits the interpreter's limits. The search keeps to them on
    every device (compiled structures have none), so a CPU and a GPU search the same
    programs."""
    try:
        encode(node)
    except ProgramError:
        return False
    return True


def pack(structures, *, tile: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Several structures in the interpreter's buffers: their instructions one after the
    other (g_code), per structure a row (first instruction, instruction count | result
    register << 16, first scale, slot count: g_structures), and each structure's slot
    scales (g_scales,
    dsl.param_scales: the optimiser sees value / scale)."""
    codes = [encode(s, tile=tile) for s in structures]
    scales = [param_scales(s) for s in structures]
    table, first, first_scale = [], 0, 0
    for c, sc in zip(codes, scales):
        table.append((first, len(c.code) | c.result << 16, first_scale, len(sc)))
        first += len(c.code)
        first_scale += len(sc)
    code = np.concatenate([c.code for c in codes]) if codes else np.zeros((1, 8), np.uint32)
    flat = np.concatenate(scales + [np.ones(1)])
    return (np.ascontiguousarray(code, np.uint32), np.asarray(table, np.uint32).reshape(-1, 4),
            flat.astype(np.float32))
