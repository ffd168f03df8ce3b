"""Every place a new activation must reach (bakery/nn/activations.py says which) holds every
activation of the table, under the same name and id."""

from __future__ import annotations

import re
from pathlib import Path

from bakery.nn.activations import TABLE

REPO = Path(__file__).resolve().parent.parent


def _text(rel: str) -> str:
    return (REPO / rel).read_text(encoding="utf-8")


def test_slang_has_a_struct_and_a_coopvec_extension_per_activation():
    structs = set(re.findall(r"^struct (\w+) : IActivation", _text("bakery/nn/activations.slang"), re.M))
    extensions = set(re.findall(r"^extension (\w+) : IVecActivation", _text("bakery/nn/mlp_coopvec.slang"), re.M))
    wanted = {a.slang for a in TABLE.values()}
    assert wanted == structs
    assert wanted == extensions


def test_the_format_and_the_engine_example_list_every_id():
    rows = dict(re.findall(r"^\| `(\w+)` \| (\d+) \|", _text("docs/FORMAT.md"), re.M))
    assert {name: int(i) for name, i in rows.items() if name in TABLE} == {a.name: a.file_id for a in TABLE.values()}
    listed = re.search(r"^ACTIVATIONS = \[(.*)\]$", _text("examples/engines/unreal_import_bundle.py"), re.M).group(1)
    by_id = sorted(TABLE.values(), key=lambda a: a.file_id)
    assert [s.strip(' "') for s in listed.split(",")] == [a.name for a in by_id]
    assert [a.file_id for a in by_id] == list(range(len(by_id)))  # the list is indexed by id
