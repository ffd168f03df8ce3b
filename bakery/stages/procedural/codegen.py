"""A program tree turned into shader code.

One walk of the tree emits straight-line code over the primitives of primitives.slang.
The same walk serves two forms: the fitting form reads parameter slot ``i`` as
``p[i] * scale`` from a differentiable array, the shipped form writes each value as a
float literal inside ``float3 bakery_procedural(float2 uv)``. HLSL is the shipped Slang
with the autodiff attributes stripped (Slang is an HLSL superset and the library keeps to
the common subset); GLSL adds a small compatibility prelude of type and intrinsic macros.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np

from bakery.stages.procedural.dsl import FIELD, Node, instructions, node_type, complexity, param_scales

LIBRARY = Path(__file__).with_name("primitives.slang")
LANGUAGES = ("slang", "hlsl", "glsl")


def _literal(v: float) -> str:
    text = np.format_float_positional(np.float32(v), unique=True, trim="0")
    return text if "." in text else text + ".0"


def _emit(node: Node, slot: Callable[[int], str]) -> tuple[list[str], str]:
    """Statements computing ``node`` at ``uv`` and the variable that holds the result."""
    lines: list[str] = []
    counter = [0]
    next_slot = [0]

    def take(n: int) -> list[str]:
        s = [slot(next_slot[0] + i) for i in range(n)]
        next_slot[0] += n
        return s

    def var(kind: str, expr: str) -> str:
        name = f"v{counter[0]}"
        counter[0] += 1
        lines.append(f"    {kind} {name} = {expr};")
        return name

    def f2(a, b):
        return f"float2({a}, {b})"

    def f3(a, b, c):
        return f"float3({a}, {b}, {c})"

    def walk(n: Node, uv: str) -> str:
        op, a = n.op, n.attr
        spec = n.spec
        p = {ps.name: take(ps.count(a)) for ps in spec.params}
        if spec.transform:
            if op == "polar":
                tuv = var("float2", f"bk_polar({uv}, {f2(*p['center'])}, {p['scale'][0]})")
            else:
                tuv = var("float2", f"bk_warp({uv}, {p['frequency'][0]}, {p['amplitude'][0]}, {f2(*p['offset'])})")
            return walk(n.inputs[0], tuv)
        ins = [walk(c, uv) for c in n.inputs]
        if op == "linear_gradient":
            return var("float", f"bk_linear_gradient({uv}, {f2(*p['k'])}, {p['offset'][0]})")
        if op == "radial_gradient":
            return var("float", f"bk_radial_gradient({uv}, {f2(*p['center'])}, {p['scale'][0]}, {p['offset'][0]})")
        if op in ("stripes_sine", "stripes_saw"):
            return var("float", f"bk_{op}({uv}, {f2(*p['k'])}, {p['phase'][0]})")
        if op == "checker":
            return var("float", f"bk_checker({uv}, {p['frequency'][0]}, {f2(*p['offset'])}, {p['sharpness'][0]})")
        if op == "bricks":
            return var("float", f"bk_bricks({uv}, {f2(*p['count'])}, {f2(*p['offset'])}, {p['mortar'][0]}, "
                                f"{p['sharpness'][0]})")
        if op in ("value_noise", "gradient_noise"):
            return var("float", f"bk_{op}_field({uv}, {p['frequency'][0]}, {f2(*p['offset'])})")
        if op == "fbm":
            basis = 1 if a["basis"] == "gradient" else 0
            return var("float", f"bk_fbm({uv}, {basis}, {int(a['octaves'])}, {p['frequency'][0]}, {p['gain'][0]}, "
                                f"{f2(*p['offset'])})")
        if op == "worley":
            return var("float", f"bk_worley({uv}, {p['frequency'][0]}, {p['jitter'][0]}, {f2(*p['offset'])})")
        if op == "threshold":
            return var("float", f"bk_threshold({ins[0]}, {p['level'][0]}, {p['sharpness'][0]})")
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

    result = walk(node, "uv")
    return lines, result


def fitting_function(node: Node, name: str, max_params: int) -> str:
    """``[Differentiable] float3 name(float2 uv, float p[max_params])`` for the search:
    slot i is read as ``p[i] * scale`` so the optimiser sees unit-sized values."""
    scales = param_scales(node)

    def slot(i: int) -> str:
        s = scales[i]
        return f"p[{i}]" if s == 1.0 else f"(p[{i}] * {_literal(s)})"

    lines, result = _emit(node, slot)
    return (f"[Differentiable]\nfloat3 {name}(float2 uv, float p[{max_params}])\n{{\n"
            + "\n".join(lines) + f"\n    return {result};\n}}\n")


def _header(node: Node, lang: str) -> str:
    return (f"// Generated by bakery (stage procedural): {complexity(node)} nodes, ~{instructions(node)} instructions.\n"
            f"// float3 bakery_procedural(float2 uv): uv in [0, 1]^2 spans the source image; any uv works\n"
            f"// (the pattern continues), so render at any resolution. Language: {lang}.\n")


def library_source(*, differentiable: bool = True) -> str:
    text = LIBRARY.read_text()
    text = text.replace("#pragma once\n", "")
    if not differentiable:
        text = re.sub(r"\[Differentiable\]\s*\n", "", text)
        text = text.replace("no_diff ", "")
        text = re.sub(r"\[(MaxIters\(\d+\)|ForceUnroll)\]\s*\n", "", text)
    return text


def shader_function(node: Node) -> str:
    """The shipped function body with literal parameters, no library."""
    values = node_values(node)
    lines, result = _emit(node, lambda i: _literal(values[i]))
    return "float3 bakery_procedural(float2 uv)\n{\n" + "\n".join(lines) + f"\n    return {result};\n}}\n"


def node_values(node: Node) -> np.ndarray:
    from bakery.stages.procedural.dsl import flatten
    return flatten(node)


_GLSL_PRELUDE = """// GLSL spellings of the HLSL/Slang names the library uses.
#define float2 vec2
#define float3 vec3
#define float4 vec4
#define int2 ivec2
#define uint2 uvec2
#define lerp mix
#define frac fract
#define atan2(y, x) atan(y, x)
#define static
"""


def generate(node: Node, lang: str = "slang") -> str:
    """Standalone source of ``float3 bakery_procedural(float2 uv)`` in ``lang``."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown shader language {lang!r} (known: {', '.join(LANGUAGES)})")
    body = shader_function(node)
    if lang == "slang":
        return _header(node, lang) + library_source(differentiable=False) + "\n" + body
    lib = library_source(differentiable=False)
    if lang == "hlsl":
        return _header(node, lang) + lib + "\n" + body
    # GLSL: no `static const` at global scope, `uint` literal suffixes are fine; a `mix`
    # helper would clash with the GLSL builtin, so rename the library's own mix.
    lib = lib.replace("bk_mix(", "bk_mix_mask(")
    body = body.replace("bk_mix(", "bk_mix_mask(")
    lib = lib.replace("static const float", "const float")
    return _header(node, lang) + _GLSL_PRELUDE.replace("#define static\n", "") + lib + "\n" + body
