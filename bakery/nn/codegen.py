"""Slang source for a network: its exact widths, activations and parameter offsets baked
in as compile-time constants, so the compiler unrolls and specialises every layer."""

from __future__ import annotations

from bakery.nn.encodings import FrequencyEncoding, IdentityEncoding
from bakery.nn.network import NetworkSpec

#: Activation name (bundle format) -> Slang struct in bakery/nn/activations.slang.
SLANG_ACTIVATIONS = {"relu": "ReLU", "leaky_relu": "LeakyReLU", "tanh": "Tanh",
                     "sigmoid": "Sigmoid", "exp": "Exp", "identity": "Identity"}


def encoding_type(encoding) -> str:
    if isinstance(encoding, FrequencyEncoding):
        return f"FrequencyEncoding<{encoding.n_inputs}, {encoding.octaves}>"
    if isinstance(encoding, IdentityEncoding):
        return f"IdentityEncoding<{encoding.n_inputs}>"
    raise TypeError(f"no Slang encoding for {encoding!r}")


def program_source(spec, linear_args: list[str]) -> str:
    """The network structs of a :class:`NetworkSpec` (``struct Network``) or of a
    :class:`~bakery.nn.stack.NetworkStack` (one struct per named network)."""
    from bakery.nn.stack import NetworkStack

    if isinstance(spec, NetworkStack):
        return "".join(network_source(s, linear_args[a:b], name) for name, s, a, b in spec.layer_ranges())
    return network_source(spec, linear_args)


def network_source(spec: NetworkSpec, linear_args: list[str], name: str = "Network") -> str:
    """``struct {name}`` with ``static float[OUT] forward(float[IN])``, differentiable.

    ``linear_args[k]`` are the backend's offset arguments of layer k's ``Linear``.
    """
    last = len(spec.layers)
    body = [f"        let h0 = bk_to_vec<{spec.encoding.n_outputs}>({encoding_type(spec.encoding)}.eval(x));"]
    for k, layer in enumerate(spec.layers):
        act = SLANG_ACTIVATIONS[layer.activation]
        body.append(f"        let h{k + 1} = bk_activate<{act}, {layer.n_out}>("
                    f"Linear<{layer.n_in}, {layer.n_out}, {linear_args[k]}>.eval(h{k}));")
    return "\n".join([
        f"struct {name}",
        "{",
        f"    static const int IN = {spec.n_inputs};",
        f"    static const int OUT = {spec.n_outputs};",
        "",
        "    [Differentiable]",
        f"    static float[{spec.n_outputs}] forward(float[{spec.n_inputs}] x)",
        "    {",
        *body,
        f"        return bk_from_vec<{spec.n_outputs}>(h{last});",
        "    }",
        "}",
        "",
    ])
