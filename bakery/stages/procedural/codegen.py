"""A program tree turned into shader code.

One walk of the tree emits straight-line code over the primitives of primitives.slang,
each value a float literal, inside ``float3 bakery_procedural(float2 uv, float2 fw)``.
The search fits the same statements, either compiled with parameter slots in place of the
literals (``fitting_function``) or run as instructions (bytecode.py mirrors this walk).
HLSL and GLSL are that Slang compiled by the Slang compiler (crosscompile.py), so the
languages cannot drift.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np

from bakery.stages.procedural.crosscompile import compile_to
from bakery.stages.procedural.dsl import FIELD, Node, instructions, node_type, complexity, param_scales

LIBRARY = Path(__file__).with_name("primitives.slang")
LANGUAGES = ("slang", "hlsl", "glsl")


def _literal(v: float) -> str:
    text = np.format_float_positional(np.float32(v), unique=True, trim="0")
    return text if "." in text else text + ".0"


def slot_layout(node: Node) -> dict[tuple, dict[str, list[int]]]:
    """Parameter slots per node (by path), in the layout order of dsl.flatten: the walk
    below may emit a subtree more than once (a threshold's footprint), the slots once."""
    out: dict[tuple, dict[str, list[int]]] = {}
    counter = 0

    def visit(n: Node, path: tuple) -> None:
        nonlocal counter
        mine = {}
        for ps in n.spec.params:
            k = ps.count(n.attr)
            mine[ps.name] = list(range(counter, counter + k))
            counter += k
        out[path] = mine
        for i, c in enumerate(n.inputs):
            visit(c, path + (i,))

    visit(node, ())
    return out


def _emit(node: Node, slot: Callable[[int], str], period: Callable[[int], str]) -> tuple[list[str], str]:
    """Statements computing ``node`` at ``uv`` (pixel footprint ``fw``) and the variable
    that holds the result. ``slot(i)`` spells parameter i; ``period(i)`` the noise
    lattice period for the frequency in slot i ("0.0" when the program does not tile)."""
    lines: list[str] = []
    counter = [0]
    slots = slot_layout(node)

    def var(kind: str, expr: str) -> str:
        name = f"v{counter[0]}"
        counter[0] += 1
        lines.append(f"    {kind} {name} = {expr};")
        return name

    def f2(a, b):
        return f"float2({a}, {b})"

    def f3(a, b, c):
        return f"float3({a}, {b}, {c})"

    def transform(op: str, p: dict, uv: str) -> str:
        if op == "polar":
            return f"bk_polar({uv}, {f2(*p['center'])}, {p['scale'][0]})"
        if op == "warp":
            return f"bk_warp({uv}, {p['frequency'][0]}, {p['amplitude'][0]}, {f2(*p['offset'])}, {p['period'][0]})"
        return f"bk_{op}({uv}, {f2(*p['k'])}, {f2(*p['amplitude'])}, {p['phase'][0]})"

    def walk(n: Node, path: tuple, uv: str, fw: str) -> str:
        op, a = n.op, n.attr
        p = {name: [slot(i) for i in idx] for name, idx in slots[path].items()}
        for name in ("frequency", "count"):
            if name in slots[path]:
                p["period"] = [period(slots[path][name][0])]
        if n.spec.transform:
            # The input sees transformed coordinates and their own footprint (fwidth).
            tuv = var("float2", transform(op, p, uv))
            tx = var("float2", transform(op, p, f"({uv} + float2({fw}.x, 0.0))"))
            ty = var("float2", transform(op, p, f"({uv} + float2(0.0, {fw}.y))"))
            helper = "bk_polar_footprint" if op == "polar" else "bk_footprint"
            tfw = var("float2", f"{helper}({tuv}, {tx}, {ty})")
            return walk(n.inputs[0], path + (0,), tuv, tfw)
        if op == "threshold":
            # fwidth of the input: the subtree again at the neighbouring pixels.
            v = walk(n.inputs[0], path + (0,), uv, fw)
            vx = walk(n.inputs[0], path + (0,), f"({uv} + float2({fw}.x, 0.0))", fw)
            vy = walk(n.inputs[0], path + (0,), f"({uv} + float2(0.0, {fw}.y))", fw)
            return var("float", f"bk_threshold({v}, bk_fwidth({v}, {vx}, {vy}), {p['level'][0]})")
        ins = [walk(c, path + (i,), uv, fw) for i, c in enumerate(n.inputs)]
        if op == "linear_gradient":
            return var("float", f"bk_linear_gradient({uv}, {f2(*p['k'])}, {p['offset'][0]})")
        if op == "radial_gradient":
            return var("float", f"bk_radial_gradient({uv}, {f2(*p['center'])}, {p['scale'][0]}, {p['offset'][0]})")
        if op in ("stripes_sine", "stripes_saw", "stripes_triangle"):
            return var("float", f"bk_{op}({uv}, {f2(*p['k'])}, {p['phase'][0]})")
        if op == "checker":
            return var("float", f"bk_checker({uv}, {fw}, {p['frequency'][0]}, {f2(*p['offset'])})")
        if op == "bricks":
            return var("float", f"bk_bricks({uv}, {fw}, {f2(*p['count'])}, {f2(*p['offset'])}, {p['mortar'][0]})")
        if op == "brick_cells":
            return var("float", f"{p['amount'][0]} * bk_brick_cells({uv}, {f2(*p['count'])}, {f2(*p['offset'])}, "
                                f"{p['period'][0]})")
        if op in ("value_noise", "gradient_noise"):
            return var("float", f"bk_{op}_field({uv}, {p['frequency'][0]}, {f2(*p['offset'])}, {p['period'][0]})")
        if op == "fbm":
            basis = 1 if a["basis"] == "gradient" else 0
            return var("float", f"bk_fbm({uv}, {basis}, {int(a['octaves'])}, {p['frequency'][0]}, {p['gain'][0]}, "
                                f"{f2(*p['offset'])}, {p['period'][0]})")
        if op == "worley":
            return var("float", f"bk_worley({uv}, {p['frequency'][0]}, {p['jitter'][0]}, {f2(*p['offset'])}, "
                                f"{p['period'][0]})")
        if op == "worley_cells":
            return var("float", f"{p['amount'][0]} * bk_worley_cells({uv}, {p['frequency'][0]}, {p['jitter'][0]}, "
                                f"{f2(*p['offset'])}, {p['period'][0]})")
        if op in ("add", "multiply"):
            kind = "float" if node_type(n) == FIELD else "float3"
            return var(kind, f"{ins[0]} {'+' if op == 'add' else '*'} {ins[1]}")
        if op == "ramp":
            pos, col = p["positions"], p["colours"]
            c = var("float3", f3(*col[0:3]))
            for i in range(1, int(a["stops"])):
                lines.append(f"    {c} = bk_ramp_segment({c}, {f3(*col[3 * i:3 * i + 3])}, {ins[0]}, {pos[i - 1]}, {pos[i]});")
            return c
        if op == "mix":
            return var("float3", f"bk_mix({ins[0]}, {ins[1]}, {ins[2]})")
        if op == "constant":
            return var("float3", f3(*p["colour"]))
        raise ValueError(f"no code for op {op!r}")

    result = walk(node, (), "uv", "fw")
    return lines, result


def fitting_function(node: Node, name: str, max_params: int, *, tile: bool = False) -> str:
    """``[Differentiable] float3 name(float2 uv, float2 fw, float p[max_params])``, the
    compiled fitting form (fit.py, on devices that compile fast): slot i is read as
    ``p[i] * scale`` so the optimiser sees unit-sized values."""
    scales = param_scales(node)

    def slot(i: int) -> str:
        s = scales[i]
        return f"p[{i}]" if s == 1.0 else f"(p[{i}] * {_literal(s)})"

    def period(i: int) -> str:
        return f"(no_diff bk_period({slot(i)}))" if tile else "0.0"

    lines, result = _emit(node, slot, period)
    return (f"[Differentiable]\nfloat3 {name}(no_diff float2 uv, no_diff float2 fw, float p[{max_params}])\n{{\n"
            + "\n".join(lines) + f"\n    return {result};\n}}\n")


def _header(node: Node, lang: str, tile: bool) -> str:
    name = "bakery_procedural" if lang == "slang" else "bakery_procedural_0 (the Slang compiler's name)"
    return (f"// Generated by bakery (stage procedural): {complexity(node)} nodes, ~{instructions(node)} instructions.\n"
            f"// {name}(uv, fw) returns the RGB colour at uv: uv in [0, 1]^2 spans the source image; any uv\n"
            f"// works (the pattern continues{', and tiles with period 1' if tile else ''}); fw is the pixel footprint in uv\n"
            f"// units (fwidth(uv) in a pixel shader), over which edges are anti-aliased. The compute entry\n"
            f"// point {BAKE_ENTRY} fills an RGBA float image at any size. Language: {lang}"
            f"{'' if lang == 'slang' else ', compiled from the Slang program by the Slang compiler'}.\n")


def library_source(*, differentiable: bool = True) -> str:
    text = LIBRARY.read_text()
    text = text.replace("#pragma once\n", "")
    if not differentiable:
        text = re.sub(r"\[Differentiable\]\s*\n", "", text)
        text = text.replace("no_diff ", "")
        text = re.sub(r"\[(MaxIters\(\d+\)|ForceUnroll)\]\s*\n", "", text)
    return text


def shader_function(node: Node, size: tuple[int, int] = (256, 256), *, tile: bool = False) -> str:
    """The shipped function with literal parameters, no library; ``size`` (width,
    height) is the source image, whose pixel is the one-argument form's footprint."""
    values = node_values(node)

    def period(i: int) -> str:
        return _literal(max(1.0, float(np.round(values[i])))) if tile else "0.0"

    lines, result = _emit(node, lambda i: _literal(values[i]), period)
    w, h = size
    return ("float3 bakery_procedural(float2 uv, float2 fw)\n{\n" + "\n".join(lines) + f"\n    return {result};\n}}\n\n"
            f"float3 bakery_procedural(float2 uv)\n{{\n    return bakery_procedural(uv, "
            f"float2({_literal(1.0 / w)}, {_literal(1.0 / h)}));\n}}\n")


def node_values(node: Node) -> np.ndarray:
    from bakery.stages.procedural.dsl import flatten
    return flatten(node)


#: The shipped compute entry point: draws the texture into any RGBA float image, each
#: pixel's footprint its own size. HLSL and GLSL are the compiler's translation of it.
BAKE_ENTRY = "bakery_procedural_bake"
_BAKE = f"""
RWTexture2D<float4> bakery_output;

[shader("compute")]
[numthreads(8, 8, 1)]
void {BAKE_ENTRY}(uint3 tid: SV_DispatchThreadID)
{{
    uint width, height;
    bakery_output.GetDimensions(width, height);
    if (tid.x >= width || tid.y >= height)
        return;
    float2 fw = float2(1.0 / float(width), 1.0 / float(height));
    bakery_output[tid.xy] = float4(bakery_procedural((float2(tid.xy) + 0.5) * fw, fw), 1.0);
}}
"""


def generate(node: Node, lang: str = "slang", size: tuple[int, int] = (256, 256), *, tile: bool = False) -> str:
    """Standalone source of ``float3 bakery_procedural(float2 uv[, float2 fw])`` and the
    compute entry point ``bakery_procedural_bake`` in ``lang``: the Slang written here,
    HLSL and GLSL compiled from it by the Slang compiler (crosscompile.py; there the
    compiler names the function ``bakery_procedural_0``)."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown shader language {lang!r} (known: {', '.join(LANGUAGES)})")
    slang = library_source(differentiable=False) + "\n" + shader_function(node, size, tile=tile) + _BAKE
    if lang == "slang":
        return _header(node, lang, tile) + slang
    return _header(node, lang, tile) + compile_to(slang, BAKE_ENTRY, lang)
