"""Slang source for a network: its exact widths, activations and parameter offsets baked
in as compile-time constants, so the compiler unrolls and specialises every layer."""

from __future__ import annotations

from bakery.nn import activations
from bakery.nn.network import NetworkSpec

#: Where the CoopVec backend's networks take their generated backward pass
#: (``layer_backward_source``, ``kept_source``) instead of Slang's autodiff
#: (nn/mlp_coopvec.slang); ParameterStore's BK_KEPT is set under the same condition.
GENERATED = "BK_GEN_BWD"


def program_source(spec, linear_args: list[str]) -> str:
    """The network structs of a :class:`NetworkSpec` (``struct Network``) or of a
    :class:`~bakery.nn.stack.NetworkStack` (one struct per named network)."""
    from bakery.nn.stack import NetworkStack

    ranges = spec.layer_ranges() if isinstance(spec, NetworkStack) else [("Network", spec, 0, len(spec.layers))]
    structs = "".join(network_source(s, linear_args[a:b], name) for name, s, a, b in ranges)
    # Split-K (CoopVec) reduces the program's layers by their index in the whole parameter
    # store: each network sums its own, by its own (local) layer index.
    dispatch = "\n".join(f"    if (layer >= {a} && layer < {b}) {name}.reduce_gradients(layer - {a}, begin, end);"
                          for name, _, a, b in ranges)
    return structs + ("// Split-K weight gradients of layer `layer` of the whole program (nn/grad_reduce.slang).\n"
                      f"void bk_reduce_program(uint layer, uint begin, uint end)\n{{\n{dispatch}\n}}\n\n")


def network_source(spec: NetworkSpec, linear_args: list[str], name: str = "Network") -> str:
    """``struct {name}`` with ``static float[OUT] forward(float[IN])``, differentiable.

    ``linear_args[k]`` are the backend's offset arguments of layer k's ``Linear``.
    """
    last = len(spec.layers)
    linears = [f"Linear<{l.n_in}, {l.n_out}, {linear_args[k]}>" for k, l in enumerate(spec.layers)]
    # CoopVec's Linear arguments carry DX (is the layer's input gradient used?) sixth: the
    # first layer's says whether bk_to_vec's backward must produce the network's.
    first = linear_args[0].split(", ")
    grad = first[5] if len(first) > 5 else "1"
    body = _forward_layers(spec, linears, "x", grad, "let h")
    layered = (layer_backward_source(spec, linears, grad) + kept_source(spec, linears, grad)
               if len(first) > 7 else [])
    return "\n".join([
        f"struct {name}",
        "{",
        f"    static const int IN = {spec.n_inputs};",
        f"    static const int OUT = {spec.n_outputs};",
        "",
        "    [Differentiable]",
        *([f"#if {GENERATED}", "    [BackwardDerivative(backward_layers)]", "#endif"] if layered else []),
        f"    static float[{spec.n_outputs}] forward(float[{spec.n_inputs}] x)",
        "    {",
        *body,
        f"        return bk_from_vec<{spec.n_outputs}>(h{last});",
        "    }",
        "",
        *layered,
        "    // After a workgroup's last training tile: its share of the weight gradients.",
        "    static void store_gradients(uint group)",
        "    {",
        *[f"        {lin}.store_gradients(group);" for lin in linears],
        "    }",
        "",
        "    // Split-K weight gradients (CoopVec BK_GRAD_MODE 2): layer's share of samples.",
        "    static void reduce_gradients(uint layer, uint begin, uint end)",
        "    {",
        *[f"        if (layer == {k}) {lin}.reduce_gradients(begin, end);" for k, lin in enumerate(linears)],
        "    }",
        "}",
        "",
    ])


def _forward_layers(spec: NetworkSpec, linears: list[str], x: str, grad: str, h: str) -> list[str]:
    """The network's layers from input ``x`` on, layer k's output bound as ``{h}k`` ("let h"
    declares them, "kept.h" fills a Kept); ``grad``: bk_to_vec's G (is the network's input
    gradient read?)."""
    enc = spec.encoding.slang_type()
    body = [f"        {h}0 = bk_to_vec<{spec.encoding.n_outputs}, {grad}>({enc}.eval({x}));"]
    ref = h.split()[-1]  # how later lines name the outputs: "let h" binds h0, h1, ...
    for k, layer in enumerate(spec.layers):
        act = activations.get(layer.activation).slang
        body.append(f"        {h}{k + 1} = bk_activate<{act}, {layer.n_out}>({linears[k]}.eval({ref}{k}));")
    return body


def _reverse_layers(spec: NetworkSpec, linears: list[str], grad: str, h: str) -> list[str]:
    """The generated backward pass after the forward: the loss gradient ``dy`` enters the
    last layer, each layer's backward_step runs in reverse from the kept outputs ``{h}k``,
    and the encoding's backward pass gives ``x`` its gradient where anything reads it."""
    enc = spec.encoding.slang_type()
    acts = [activations.get(l.activation).slang for l in spec.layers]
    last = len(spec.layers)
    # d{k}: the gradient at layer k's output (before its activation).
    body = [f"        let d{last - 1} = bk_output_gradient<{acts[-1]}, {spec.n_outputs}>({h}{last}, dy);"]
    for k in range(last - 1, 0, -1):
        body.append(f"        let d{k - 1} = {acts[k - 1]}.dvy<{spec.layers[k].n_in}>("
                    f"{h}{k}, {linears[k]}.backward_step({h}{k}, d{k}));")
    body.append(f"        let dx = {linears[0]}.backward_step({h}0, d0);")
    if grad != "0":
        body.append(f"        bwd_diff({enc}.eval)(x, bk_input_gradient<{spec.encoding.n_outputs}>(dx));")
    else:
        body.append(f"        float[{spec.n_inputs}] none = {{}};")
        body.append("        x = diffPair(x.p, none);")
    return body


def kept_source(spec: NetworkSpec, linears: list[str], grad: str) -> list[str]:
    """CoopVec backend: ``forward_kept`` and ``backward_kept``, the training sample's
    forward and backward passes split where the objective's loss sits between them. The
    forward keeps every layer's output in a ``Kept``, so the backward pass needs no second
    forward: ``bwd_diff`` through ``forward`` runs the network's forward twice (its primal,
    then again in ``backward_layers``): 3.6 of the texture fit's 92 µs of network on the
    H200. Same products, stores and scaling as ``backward_layers``."""
    last = len(spec.layers)
    widths = [spec.encoding.n_outputs] + [l.n_out for l in spec.layers]
    fields = [f"        CoopVec<half, {n}> h{k};" for k, n in enumerate(widths)]
    body = _forward_layers(spec, linears, "x", "0", "kept.h")
    return [f"#if {GENERATED}",
            "    // One training sample's layer outputs between forward_kept and backward_kept.",
            "    struct Kept", "    {", *fields, "    };", "",
            f"    static float[{spec.n_outputs}] forward_kept(float[{spec.n_inputs}] x, out Kept kept)",
            "    {", *body, f"        return bk_from_vec<{spec.n_outputs}>(kept.h{last});", "    }", "",
            "    // dy: d loss / d output, as bwd_diff would pass it to backward_layers.",
            f"    static void backward_kept(Kept kept, inout DifferentialPair<float[{spec.n_inputs}]> x, "
            f"float[{spec.n_outputs}] dy)",
            "    {", *_reverse_layers(spec, linears, grad, "kept.h"), "    }", "#endif", ""]


def layer_backward_source(spec: NetworkSpec, linears: list[str], grad: str) -> list[str]:
    """CoopVec backend: ``backward_layers``, the network's backward pass written out rather
    than derived by Slang's autodiff: the forward again, keeping only each layer's output
    (every activation's derivative follows from its output, as whole-vector fp16
    operations), then the layers in reverse, each doing what its backward() does (split-K
    row stores, or the staged per-thread sums) and returning dx = W^T dz
    (``Linear.backward_step``: one transposed matrix-vector product per sample)."""
    body = _forward_layers(spec, linears, "x.p", "0", "let h") + _reverse_layers(spec, linears, grad, "h")
    return [f"#if {GENERATED}",
            f"    static void backward_layers(inout DifferentialPair<float[{spec.n_inputs}]> x, "
            f"float[{spec.n_outputs}] dy)",
            "    {", *body, "    }", "#endif", ""]
