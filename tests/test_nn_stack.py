"""NetworkStack: several networks in one parameter array, one Slang struct each."""

from __future__ import annotations

import numpy as np
import pytest

from bakery.nn.codegen import program_source
from bakery.nn.encodings import IdentityEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.stack import NetworkStack


def _stack():
    a = NetworkSpec(IdentityEncoding(3), (4,), 2, "relu", "sigmoid")
    b = NetworkSpec(IdentityEncoding(5), (6, 6), 1)
    return a, b, NetworkStack((("Encoder", a), ("Network", b)))


def test_layers_are_laid_end_to_end():
    a, b, s = _stack()
    assert s.param_count == a.param_count + b.param_count
    assert [l.weight_offset for l in s.layers] == ([l.weight_offset for l in a.layers]
                                                  + [l.weight_offset + a.param_count for l in b.layers])
    p = s.init_params(5)
    parts = s.unstack(p)
    np.testing.assert_array_equal(parts["Encoder"], a.init_params(5))
    np.testing.assert_array_equal(parts["Network"], b.init_params(6))
    with pytest.raises(ValueError):
        s.unstack(p[:-1])


def test_names_must_be_distinct_identifiers():
    a, b, _ = _stack()
    with pytest.raises(ValueError):
        NetworkStack((("Net", a), ("Net", b)))
    with pytest.raises(ValueError):
        NetworkStack((("not a name", a),))


def test_program_source_has_one_struct_per_network_with_stacked_offsets():
    a, _, s = _stack()
    args = [f"{l.weight_offset}, {l.bias_offset}" for l in s.layers]
    src = program_source(s, args)
    assert "struct Encoder" in src and "struct Network" in src
    first_decoder = s.layers[len(a.layers)]
    assert f"Linear<5, 6, {first_decoder.weight_offset}, {first_decoder.bias_offset}>" in src
    assert "static float[2] forward(float[3] x)" in src and "static float[1] forward(float[5] x)" in src
