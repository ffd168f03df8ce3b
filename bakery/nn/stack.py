"""Several networks trained by one objective (an encoder feeding a decoder, say).

A :class:`NetworkStack` lays its networks' canonical parameter arrays end to end and
exposes the same ``layers`` / ``param_count`` / ``init_params`` a single
:class:`NetworkSpec` does, so one :class:`ParameterStore` (either backend), one Adam
and one gradient accumulator serve them all; codegen emits one Slang struct per
network, each with its layers' offsets inside the shared store.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from bakery.nn.network import LayerSlice, NetworkSpec


@dataclass(frozen=True)
class NetworkStack:
    """Named networks in one parameter array, in order: ``(("Encoder", spec), ("Network", spec))``."""

    networks: tuple[tuple[str, NetworkSpec], ...]
    layers: tuple[LayerSlice, ...] = field(init=False, repr=False, compare=False)
    offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        names = [n for n, _ in self.networks]
        if not names or len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise ValueError(f"a stack needs distinct identifier names, got {names}")
        layers, offsets, base = [], [], 0
        for _, spec in self.networks:
            offsets.append(base)
            layers += [replace(l, weight_offset=l.weight_offset + base, bias_offset=l.bias_offset + base)
                       for l in spec.layers]
            base += spec.param_count
        object.__setattr__(self, "layers", tuple(layers))
        object.__setattr__(self, "offsets", tuple(offsets))

    @property
    def param_count(self) -> int:
        return sum(spec.param_count for _, spec in self.networks)

    def __getitem__(self, name: str) -> NetworkSpec:
        return dict(self.networks)[name]

    def layer_ranges(self) -> list[tuple[str, NetworkSpec, int, int]]:
        """(name, spec, first layer, end layer) into ``layers`` per network."""
        out, k = [], 0
        for name, spec in self.networks:
            out.append((name, spec, k, k + len(spec.layers)))
            k += len(spec.layers)
        return out

    def init_params(self, seed: int) -> np.ndarray:
        """Each network's own init, network k seeded with ``seed + k``."""
        return np.concatenate([spec.init_params(seed + k) for k, (_, spec) in enumerate(self.networks)])

    def unstack(self, params: np.ndarray) -> dict[str, np.ndarray]:
        """Each network's canonical parameters (copies) from the stacked array."""
        params = np.asarray(params)
        if params.shape != (self.param_count,):
            raise ValueError(f"expected {self.param_count} parameters, got shape {params.shape}")
        return {name: params[o:o + spec.param_count].copy()
                for (name, spec), o in zip(self.networks, self.offsets)}

    def to_dict(self) -> dict:
        return {name: spec.to_dict() for name, spec in self.networks}
