"""Choosing the CoopVec backend's gradient reduction for a benchmark run, and the lab's
variants of it that the product does not ship.

The product picks one reduction per device and network (bakery.nn.parameters.
default_reduction); a benchmark that compares designs makes every ParameterStore of the
process take the one it names instead, by replacing that choice. The variants that exist
only to be measured live here, built from the product's pieces without a switch in
``bakery/``:

- :func:`forward_twice`: the generated backward pass after a second forward (bwd_diff
  through Network.forward) instead of the one the objective kept (BK_KEPT);
- :class:`Variant` ``skip_sum``: split-K without its sum dispatch (wrong gradients: times
  the training kernel's row stores alone);
- :func:`without_row_stores`: a network whose layers leave the split-K row stores out
  (compiled in, never run), to time the backward pass alone (bench/backward_anatomy.py).

Designs measured and dropped (fp32 atomics, other stagings, transposed weight copies, the
backward pass on cooperative matrices, per-thread split-K sums, the sum spread over 32-lane
warps) are in bench/HISTORY.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from bakery.nn import parameters
from bakery.nn.parameters import CoopVecReduction

_LAB_FIELDS = ("forward_twice", "skip_sum")
_PRODUCT_CHOICE = parameters.default_reduction
_PRODUCT_DEFINES = parameters.ParameterStore.defines
_chosen: Variant | None = None


@dataclass(frozen=True)
class Variant:
    """A reduction the product can run (None: the one the product chooses for each
    network), and how the lab changes it around it."""

    reduction: CoopVecReduction | None
    forward_twice: bool = False
    skip_sum: bool = False  # split-K: leave the sum dispatch out (wrong gradients)

    def to_dict(self, used: CoopVecReduction | None = None) -> dict:
        """The reduction's fields (``used``: the one a store took, where the product
        chose) and the lab's."""
        reduction = self.reduction or used
        return dict(reduction.__dict__ if reduction is not None else {},
                    **{k: getattr(self, k) for k in _LAB_FIELDS})

    @classmethod
    def from_dict(cls, d: dict) -> Variant:
        """The inverse of :meth:`to_dict`; without any reduction field, the lab's changes to
        the product's choice. A field neither takes (one of a removed design's, from an
        older result file) is refused: dropped, the run would time another design under
        its name."""
        own = {f.name for f in fields(CoopVecReduction)}
        unknown = sorted(set(d) - own - set(_LAB_FIELDS))
        if unknown:
            raise ValueError(f"unknown gradient reduction field(s) {', '.join(unknown)} (known: "
                             f"{', '.join(sorted(own))}, {', '.join(_LAB_FIELDS)}; removed designs: bench/HISTORY.md)")
        named = {k: v for k, v in d.items() if k in own}
        return cls(CoopVecReduction(**named) if named else None,
                   **{k: bool(d.get(k, False)) for k in _LAB_FIELDS})


def always(reduction: CoopVecReduction):
    """A stand-in for default_reduction that picks ``reduction`` for every network."""
    return lambda device, spec: reduction


def forward_twice(defines):
    """``ParameterStore.defines`` with BK_KEPT 0: objectives differentiate through
    Network.forward, whose generated backward pass runs the forward again, rather than
    keeping the training sample's forward (what the kept forward saves)."""
    def patched(store) -> str:
        text = defines(store)
        if store.coopvec and "#define BK_KEPT 1\n" not in text:  # else it would time the product unchanged
            raise ValueError("forward_twice: this reduction keeps no forward (BK_KEPT is not 1); "
                             "it needs generated_backward")
        return text.replace("#define BK_KEPT 1\n", "#define BK_KEPT 0\n")
    return patched


def use(variant: Variant | CoopVecReduction | None) -> Variant | None:
    """Every ParameterStore made from now on takes ``variant`` (None: the product's choice)."""
    global _chosen
    if isinstance(variant, CoopVecReduction):
        variant = Variant(variant)
    _chosen = variant
    chosen_reduction = None if variant is None else variant.reduction
    parameters.default_reduction = _PRODUCT_CHOICE if chosen_reduction is None else always(chosen_reduction)
    parameters.ParameterStore.defines = (forward_twice(_PRODUCT_DEFINES) if variant is not None
                                         and variant.forward_twice else _PRODUCT_DEFINES)
    return variant


def apply(trainer) -> None:
    """What the chosen variant changes in a built Trainer: ``skip_sum`` drops its split-K
    sum dispatch (the training kernel stays the product's)."""
    if _chosen is not None and _chosen.skip_sum:
        trainer._reduce = None


def use_json(spec: str) -> Variant:
    """:func:`use` from JSON: a Variant's fields (a CoopVecReduction's, and the lab's), or
    bench/grad_reduction.py's output file (its "best" entry)."""
    d = json.loads(Path(spec).read_text() if Path(spec).is_file() else spec)
    if "benchmark" in d:  # a grad_reduction.py result: its fastest correct variant, if any
        d = d.get("best") or {}
    variant = Variant.from_dict(d)
    if variant.skip_sum:  # only grad_reduction.py times it (wrong gradients)
        raise ValueError("skip_sum is grad_reduction.py's diagnostic (wrong gradients), not a reduction to train with")
    return use(variant)


def chosen() -> Variant | None:
    """The variant :func:`use` set, or None where the product chooses."""
    return _chosen


#: The layer type of :func:`without_row_stores`: the product's Linear, except that its
#: backward pass keeps the split-K rows only for a sample that never comes (so the
#: compiler keeps the pass it would run, without the stores).
NO_STORES_LAYER = r"""
struct LabLinear<let I : int, let O : int, let WO : int, let BO : int, let PW : int, let PB : int, let AO : int,
                 let DX : int, let XO : int, let DO : int>
{
    typealias L = Linear<I, O, WO, BO, PW, PB, AO, DX, XO, DO>;

    [Differentiable]
    [BackwardDerivative(backward)]
    static CoopVec<half, O> eval(CoopVec<half, I> x) { return L.eval(x); }

    static void backward(inout DifferentialPair<CoopVec<half, I>> x, CoopVec<half, O> dy)
    {
        if (bk_sample == 0xFFFFFFFFu)
            L.keep_for_gradients(x.p, dy);
        CoopVec<half, I> dx = CoopVec<half, I>(half(0.0));
        if (DX != 0)
            dx = coopVecMatMul<half, I>(dy, CoopVecComponentType::Float16, g_weights16, WO,
                                        CoopVecComponentType::Float16, CoopVecMatrixLayout::TrainingOptimal, true, 0);
        x = diffPair(x.p, dx);
    }

    static CoopVec<half, I> backward_step(CoopVec<half, I> x, CoopVec<half, O> dz)
    {
        var p = diffPair(x);
        backward(p, dz);
        return p.d;
    }

    static void store_gradients(uint group) { L.store_gradients(group); }
    static void reduce_gradients(uint begin, uint end) { L.reduce_gradients(begin, end); }
}
"""


def without_row_stores(network_source: str) -> str:
    """A generated network's source (nn/codegen.py) whose layers are :data:`NO_STORES_LAYER`:
    include it after nn/mlp.slang."""
    return NO_STORES_LAYER + network_source.replace("Linear<", "LabLinear<")

