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
- :class:`Variant` ``spread_sum``: split-K's sum with each warp owning as few output tiles
  as 32-lane warps allow (:data:`LAB_SUM_LAYER`), so that on a layer with at least as
  many output tiles as the workgroup has warps no two warps add to the same weights: half
  the 64-bit fixed-point atomics on a 64-wide layer at 128 threads;
- :class:`Variant` ``skip_flush``: split-K's sum without its fixed-point atomics (compiled
  in, never run; wrong gradients: times what the atomics cost the sum);
- :func:`without_row_stores`: a network whose layers leave the split-K row stores out
  (compiled in, never run), to time the backward pass alone (bench/backward_anatomy.py).

Designs measured and dropped (fp32 atomics, other stagings, transposed weight copies, the
backward pass on cooperative matrices, per-thread split-K sums) are in bench/HISTORY.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from bakery.nn import parameters
from bakery.nn.parameters import CoopVecReduction

_LAB_FIELDS = ("forward_twice", "skip_sum", "spread_sum", "skip_flush")
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
    spread_sum: bool = False  # split-K: the sum's warps own one output tile each at 128 threads
    skip_flush: bool = False  # split-K: the sum's atomics compiled in, never run (wrong gradients)

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
    sum dispatch; ``spread_sum`` and ``skip_flush`` rebuild it from :func:`lab_sum_source`
    (the training kernel stays the product's)."""
    if _chosen is None or trainer._reduce is None:
        return
    if _chosen.skip_sum:
        trainer._reduce = None
    elif _chosen.spread_sum or _chosen.skip_flush:
        source = lab_sum_source(trainer.source, spread=_chosen.spread_sum, flush=not _chosen.skip_flush)
        trainer._reduce = trainer.device.kernel(source + '#include "nn/grad_reduce.slang"\n', "bk_reduce_gradients")


def use_json(spec: str) -> Variant:
    """:func:`use` from JSON: a Variant's fields (a CoopVecReduction's, and the lab's), or
    bench/grad_reduction.py's output file (its "best" entry)."""
    d = json.loads(Path(spec).read_text() if Path(spec).is_file() else spec)
    if "benchmark" in d:  # a grad_reduction.py result: its fastest correct variant, if any
        d = d.get("best") or {}
    variant = Variant.from_dict(d)
    for diagnostic in ("skip_sum", "skip_flush"):  # only grad_reduction.py times them (wrong gradients)
        if getattr(variant, diagnostic):
            raise ValueError(f"{diagnostic} is grad_reduction.py's diagnostic (wrong gradients), "
                             "not a reduction to train with")
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


#: The split-K sum of one layer with the output tiles spread over the workgroup's warps as
#: LAB_SUM_LANES-lane warps allow: at 64, as the product's; at 32 (``spread_sum``), as 32-lane
#: warps allow (the product's bk_reduce_layer_mma spreads them as 64-lane waves
#: would, so at 128 threads on a 32-lane GPU two warps share each 64-wide layer's tiles,
#: each summing half the sample blocks, and every weight takes two fixed-point atomics per
#: workgroup). Here each warp owns ceil(tiles / (threads / 32)) tiles: one at 128 threads,
#: every weight one atomic per workgroup, half the accumulator tiles per warp; the block's
#: input tiles are read by every warp instead of every other. Where warps are wider than
#: 32 lanes, a warp takes its owners in turn (owner, owner + warps, ...), so any subgroup
#: size sums every tile. The same products and flush as the product's, so the sum is the
#: same up to each partial's fixed-point rounding. LAB_SUM_FLUSH 0 (``skip_flush``) keeps the
#: flush behind a condition the compiler cannot decide and never meets.
LAB_SUM_LAYER = r"""
void lab_reduce_layer<let I : int, let O : int, let PW : int, let PB : int, let XO : int, let DO : int>(uint begin, uint end)
{
    static const int TI = (I + 15) / 16, TO = (O + 15) / 16;
    static const int PER_WARP = (TO + BK_GROUP / LAB_SUM_LANES - 1) / (BK_GROUP / LAB_SUM_LANES);  // o-tiles per warp
    static const uint XW = bk_slot_bytes(I), DW = bk_slot_bytes(O);
    static const uint XS = bk_act_tile_stride(XW), DS = bk_act_tile_stride(DW);
    uint lanes = WaveGetLaneCount();
    uint warps = BK_GROUP / lanes, warp = bk_thread / lanes;
    uint owners = (uint(TO) + PER_WARP - 1) / PER_WARP;
    uint splits = max(1u, warps / owners);                                     // warps sharing o-tiles
    if (warp >= owners * splits)
        return;
    uint split = warp / owners;
    let ones = BkTileB(half(1.0));
    static const int U = BK_REDUCE_UNROLL;
    for (uint owner = warp % owners; owner < owners; owner += warps)
    {
        uint first = owner * PER_WARP;
        BkTileC acc[PER_WARP][TI + 1];
        [ForceUnroll]
        for (int p = 0; p < PER_WARP; p++)
            [ForceUnroll]
            for (int t = 0; t <= TI; t++)
                acc[p][t] = BkTileC(0.0);
        for (uint s = begin + 16 * split; s < end; s += 16 * splits * U)
        {
            BkTileB x[U][TI];
            BkTileA dyT[U][PER_WARP];
            [ForceUnroll]
            for (int u = 0; u < U; u++)
            {
                uint su = s + 16 * splits * u;
                uint sample = su < end ? su : s;
                [ForceUnroll]
                for (int t = 0; t < TI; t++)
                    x[u][t] = BkTileB.Load<linalg.CoopMatMatrixLayout.RowMajor>(g_acts, bk_act_byte(sample, XO, XW, 32 * t) / 2, XS);
                [ForceUnroll]
                for (int p = 0; p < PER_WARP; p++)
                    dyT[u][p] = BkTileA.Load<linalg.CoopMatMatrixLayout.ColumnMajor>(
                        g_acts, bk_act_byte(sample, DO, DW, 32 * min(first + p, uint(TO - 1))) / 2, DS);
            }
            [ForceUnroll]
            for (int u = 0; u < U; u++)
            {
                if (s + 16 * splits * u >= end)
                    break;
                [ForceUnroll]
                for (int p = 0; p < PER_WARP; p++)
                {
                    if (first + p >= uint(TO))
                        break;
                    [ForceUnroll]
                    for (int t = 0; t < TI; t++)
                        acc[p][t] = linalg.coopMatMulAdd<float, false>(dyT[u][p], x[u][t], acc[p][t]);
                    acc[p][TI] = linalg.coopMatMulAdd<float, false>(dyT[u][p], ones, acc[p][TI]);
                }
            }
        }
        if (LAB_SUM_FLUSH == 0 && begin != 0xFFFFFFFFu)
            continue;
        [ForceUnroll]
        for (int p = 0; p < PER_WARP; p++)
        {
            uint ot = first + p;
            if (ot >= uint(TO))
                break;
            [ForceUnroll]
            for (int t = 0; t <= TI; t++)
                bk_mma_flush<I, O, PW, PB>(acc[p][t], warp, int(16 * ot), 16 * t, t == TI);
        }
    }
}

struct LabSumLinear<let I : int, let O : int, let WO : int, let BO : int, let PW : int, let PB : int, let AO : int,
                       let DX : int, let XO : int, let DO : int>
{
    typealias L = Linear<I, O, WO, BO, PW, PB, AO, DX, XO, DO>;

    [Differentiable]
    [BackwardDerivative(backward)]
    static CoopVec<half, O> eval(CoopVec<half, I> x) { return L.eval(x); }

    static void backward(inout DifferentialPair<CoopVec<half, I>> x, CoopVec<half, O> dy) { L.backward(x, dy); }

    static CoopVec<half, I> backward_step(CoopVec<half, I> x, CoopVec<half, O> dz) { return L.backward_step(x, dz); }

    static void store_gradients(uint group) { L.store_gradients(group); }

    static void reduce_gradients(uint begin, uint end) { lab_reduce_layer<I, O, PW, PB, XO, DO>(begin, end); }
}
"""

#: Where a Trainer's program source (defines, nn/mlp.slang, then the generated networks)
#: starts its networks.
_NETWORKS_AFTER = '#include "nn/mlp.slang"\n'


def lab_sum_source(program: str, spread: bool = True, flush: bool = True) -> str:
    """A Trainer's program source (``Trainer.source``) whose networks' layers sum their
    split-K gradients as :data:`LAB_SUM_LAYER` does (``spread``: over 32-lane warps, else as
    the product spreads them; ``flush``: else the atomics never run); everything else the
    product's."""
    head, mark, networks = program.partition(_NETWORKS_AFTER)
    if not mark:
        raise ValueError("lab sum: the program does not include nn/mlp.slang")
    defines = f"#define LAB_SUM_LANES {32 if spread else 64}\n#define LAB_SUM_FLUSH {int(flush)}\n"
    return head + mark + defines + LAB_SUM_LAYER + networks.replace("Linear<", "LabSumLinear<")
