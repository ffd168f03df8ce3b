"""The user's function as Slang reflection sees it, and the check of a spec's bindings
against it.

The shader is compiled once on the device for reflection; a compile failure becomes the
compiler's first error as ``file:line:col: error[E...]: message`` (a task failure, so the
rest of a bake goes on). Every binding problem names the function's real parameters.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from bakery.errors import TaskError, display_path
from bakery.stages.fit.spec import FitSpec, SpecError

_FLOAT = re.compile(r"^(?:float|vector<float,\s*([1-4])>|float([1-4]))$")


@dataclass(frozen=True)
class Argument:
    name: str
    type_name: str  # as reflection spells it: float, vector<float,3>
    width: int | None  # components of a float/floatN argument; None for other types
    no_diff: bool
    direction: str  # in, out, inout

    def __str__(self) -> str:
        return f"{'no_diff ' if self.no_diff else ''}{slang_type(self.width) if self.width else self.type_name} {self.name}"


@dataclass(frozen=True)
class Signature:
    function: str
    arguments: tuple[Argument, ...]
    returns: str
    return_width: int | None
    differentiable: bool

    def describe(self) -> str:
        return f"{self.function}({', '.join(map(str, self.arguments))})"


def slang_type(width: int) -> str:
    return "float" if width == 1 else f"float{width}"


def _width(type_name: str) -> int | None:
    m = _FLOAT.match(type_name.replace(" ", ""))
    if not m:
        return None
    return int(m.group(1) or m.group(2) or 1)


def shader_include(spec: FitSpec) -> str:
    """The lines that bring the user's file into a generated program. Its content hash is
    part of the text, so an edited shader never reuses a compiled program."""
    digest = hashlib.sha256(spec.shader.read_bytes()).hexdigest()[:16]
    return f'// user shader {spec.shader.name} sha256 {digest}\n#include "{spec.shader.as_posix()}"\n'


def compile_error(spec: FitSpec, e: Exception) -> TaskError:
    """The compiler's first error, located in the user's file when it is there."""
    text = str(e)
    head = re.search(r"error\[(E\d+)\]:\s*(.*)", text)
    loc = re.search(r"-->\s*(.+?):(\d+):(\d+)", text)
    caret = re.search(r"\^+\s+(.+)", text)
    if not head:
        first = next((l for l in text.splitlines() if l.strip() and not l.startswith("Failed to load")), text)
        return TaskError(f"Slang compile error: {first.strip()}", where=display_path(spec.shader))
    message = caret.group(1).strip() if caret else head.group(2).strip()
    where = f"{display_path(Path(loc.group(1)))}:{loc.group(2)}:{loc.group(3)}" if loc else display_path(spec.shader)
    return TaskError(f"error[{head.group(1)}]: {message}", where=where)


def reflect(device, spec: FitSpec) -> Signature:
    """Compiles the user's file on ``device`` and reads ``spec.function``'s signature."""
    import slangpy as spy

    try:
        module = device.module(shader_include(spec))
    except spy.SlangCompileError as e:
        raise compile_error(spec, e) from None
    fn = module.layout.find_function_by_name(spec.function)
    if fn is None:
        raise SpecError([spec.error("function", f"no function {spec.function!r} in {spec.shader.name}")])
    args = []
    for p in fn.parameters:
        t = p.type.full_name
        direction = ("inout" if p.has_modifier(spy.ModifierID.inout) else
                     "out" if p.has_modifier(spy.ModifierID.out) else "in")
        args.append(Argument(p.name, t, _width(t), bool(p.has_modifier(spy.ModifierID.nodiff)), direction))
    ret = fn.return_type.full_name
    return Signature(spec.function, tuple(args), ret, _width(ret), bool(fn.has_modifier(spy.ModifierID.differentiable)))


def check_bindings(spec: FitSpec, sig: Signature, size: tuple[int, int], channels: dict[str, int]) -> None:
    """Every argument bound once, with a shape its type can take; raises :class:`SpecError`.

    ``size`` is the output (width, height); ``channels`` the channel count of each image
    binding (and of ``init`` images, under ``NAME.init``).
    """
    lines = []
    real = f"{sig.function}'s parameters: {', '.join(map(str, sig.arguments)) or 'none'}"
    if not sig.differentiable:
        lines.append(spec.error("function", f"{sig.function} is not [Differentiable]; mark it so Slang can "
                                            f"differentiate it ({real})"))
    if sig.return_width is None:
        lines.append(spec.error("function", f"{sig.function} returns {sig.returns}; a fit needs float, float2, "
                                            "float3 or float4 (compared with the reference's channels)"))
    by_name = {a.name: a for a in sig.arguments}
    for name in spec.args:
        if name not in by_name:
            lines.append(spec.error(f"args.{name}", f"{sig.function} has no argument {name!r} ({real})"))
    for a in sig.arguments:
        b = spec.args.get(a.name)
        if b is None:
            lines.append(spec.error("args", f"argument {a.name!r} is not bound; add args.{a.name} = ... ({real})"))
            continue
        key = f"args.{a.name}"
        if a.direction != "in":
            lines.append(spec.error(key, f"argument '{a}' is {a.direction}; a fit binds inputs only ({real})"))
            continue
        if a.width is None:
            lines.append(spec.error(key, f"argument '{a.type_name} {a.name}' has a type a fit cannot bind; "
                                         f"use float, float2, float3 or float4 ({real})"))
            continue
        problem = _shape_problem(b, a, size, channels)
        if problem:
            lines.append(spec.error(key, f"{problem} ({real})"))
    if not any(b.trainable for b in spec.args.values()):
        lines.append(spec.error("args", f"nothing to fit: bind at least one argument to a param ({real})"))
    if lines:
        raise SpecError(lines)


def _shape_problem(b, a: Argument, size: tuple[int, int], channels: dict[str, int]) -> str | None:
    want = a.width
    t = f"'{a}'"
    if b.kind == "uv":
        return None if want == 2 else f"uv is a float2 but the argument is {t}"
    if b.kind == "constant":
        return None if len(b.values) in (1, want) else \
            f"{len(b.values)} constant values for {t} (give 1, or {want})"
    if b.kind == "image":
        c = channels[b.name]
        return None if c == want else f"image {b.path.name} has {c} channel(s) but the argument is {t}"
    if a.no_diff:
        return f"{t} is no_diff: Slang gives it no gradient, so it cannot be trained"
    shape = b.shape
    if len(shape) == 0:
        return None if want == 1 else f"shape [] (a scalar) does not match {t}; use [{want}]"
    if len(shape) == 1:
        return None if shape[0] == want else f"shape [{shape[0]}] does not match {t}; use [{want}]"
    h, w, c = shape
    if c != want:
        return f"shape [{h}, {w}, {c}] has {c} channel(s) but the argument is {t}"
    if (w, h) != size:
        return (f"shape [{h}, {w}, {c}] does not match the output size {size[0]}x{size[1]}: a texture "
                f"parameter is read at each output pixel, use [{size[1]}, {size[0]}, {c}]")
    init_c = channels.get(f"{b.name}.init")
    if init_c is not None and init_c != c:
        return f"init image has {init_c} channel(s) but the parameter has {c}"
    return None
