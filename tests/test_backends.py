"""The MIP backends' wrapper (``optimizer.milp.backends``): what it hands each solver."""

from __future__ import annotations

import pytest
from ortools.linear_solver import pywraplp

from optimizer.milp.backends import Model
from optimizer.milp.solution import Status


def _knapsack(backend: str) -> Model:
    """Pick items of weights 3, 4, 5 and values 4, 5, 7 within a weight of 9: the best is 4 + 5 (12)."""
    model = Model(backend)
    picks = [model.bool_var(f"x{i}") for i in range(3)]
    model.add(model.total([w * x for w, x in zip((3, 4, 5), picks, strict=True)]) <= 9, "weight")
    model.set_objective(model.total([v * x for v, x in zip((4, 5, 7), picks, strict=True)]), maximize=True)
    return model


def test_highs_is_given_the_requested_gap_through_its_own_option(monkeypatch):
    # OR-Tools' wrapper drops RELATIVE_MIP_GAP on the way to HiGHS (ortools 9.15), which then stops at
    # its own 1e-4 and reports optimal: the gap must reach HiGHS as its own option, mip_rel_gap
    given: list[str] = []
    real = pywraplp.Solver.SetSolverSpecificParametersAsString

    def spy(self, text):
        given.append(text)
        return real(self, text)

    monkeypatch.setattr(pywraplp.Solver, "SetSolverSpecificParametersAsString", spy)
    model = _knapsack("ortools")
    status, objective, bound = model.solve(time_limit_s=5, mip_gap=0.003)
    assert given == ["mip_rel_gap=0.003"]
    assert status is Status.OPTIMAL and objective == pytest.approx(12.0) and bound == pytest.approx(12.0)


@pytest.mark.parametrize("backend", ["ortools", "pulp"])
def test_both_backends_solve_the_same_small_program_to_its_optimum(backend):
    status, objective, _ = _knapsack(backend).solve(time_limit_s=5, mip_gap=0.0)
    assert status is Status.OPTIMAL and objective == pytest.approx(12.0)
