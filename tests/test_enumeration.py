"""Pruning while building is exact: the plan table of the one-plan-at-a-time reference enumeration
is the one building every band gives."""

from __future__ import annotations

import pytest

from optimizer.catalog import load_catalog
from optimizer.plans.table import Pruner
from optimizer.plans.train import enumerate_plans
from optimizer.problem import load_priced
from tests.conftest import TINY


@pytest.mark.parametrize("edit", [
    ("", ""),  # one or a few servers of A100s or L40S
    ("max_gpus: 64}", "max_gpus: 512}"),  # multi-node bands, where data-parallel traffic grows
    ("tokens: 20B", "tokens: 200B"),  # a tighter deadline: more of the plans are bound by the batch cap
])
def test_bands_skipped_while_building_are_the_ones_pruning_drops(tmp_path, monkeypatch, edit):
    path = tmp_path / "p.yaml"
    path.write_text(TINY.replace(*edit))
    problem, catalog = load_priced(path, load_catalog())
    beaten, skips = Pruner.beaten, []

    def counted(self, *args):
        skips.append(beaten(self, *args))
        return skips[-1]

    monkeypatch.setattr(Pruner, "beaten", counted)
    pruned = enumerate_plans(problem, catalog, reference=True)
    assert any(skips)  # bands were skipped
    monkeypatch.setattr(Pruner, "beaten", lambda *args: False)  # build every band, prune afterwards
    full = enumerate_plans(problem, catalog, reference=True)
    assert pruned.candidates == full.candidates and len(full.candidates) > 0
    assert (pruned.pruned, pruned.dropped, pruned.enumerated) == (full.pruned, full.dropped, full.enumerated)
