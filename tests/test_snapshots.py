"""Snapshots of `gpuopt explain` and a short `gpuopt sweep` for three shipped problems (a training
problem that buys, one that rents, and a serving problem), run in-process from the checkout.
`gpuopt solve` of every shipped problem is snapshotted in test_problems.py, beside its solves."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from optimizer.cli import main
from tests.conftest import ROOT
from tests.snapshot import assert_snapshot

CASES = {
    "lab_quotes": ("--budget", "300k,450k,600k"),
    "rent_or_buy_pretrain": ("--deadline", "20,40"),
    "llama2_70b_serving": ("--demand", "5k,10k"),
}


def _run(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_explain_matches_its_snapshot(name, fmt, monkeypatch):
    out = _run(monkeypatch, "explain", f"problems/{name}.yaml", "--format", fmt)
    assert_snapshot(f"explain_{name}.{'txt' if fmt == 'text' else 'json'}", out)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fmt", ["text", "csv"])
def test_sweep_matches_its_snapshot(name, fmt, monkeypatch):
    out = _run(monkeypatch, "sweep", f"problems/{name}.yaml", *CASES[name], "--workers", "1", "--format", fmt)
    assert_snapshot(f"sweep_{name}.{'txt' if fmt == 'text' else 'csv'}", out)
