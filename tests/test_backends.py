"""The MIP backends' wrapper (``optimizer.milp.backends``): what it hands each solver."""

from __future__ import annotations

import random

import pytest
from ortools.linear_solver import pywraplp

from optimizer.milp.backends import Model, cbc_bound
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


# CBC's closing summary after a stop on its time limit (CBC 2.10 through PuLP, a multi-dimensional
# knapsack), maximising and minimising: PuLP returns the objective but not the bound
CBC_STOPPED_MAX = """Result - Stopped on time limit

Objective value:                11126.00000000
Upper bound:                    11172.131
Gap:                            -0.00
Enumerated nodes:               3811
"""
CBC_STOPPED_MIN = CBC_STOPPED_MAX.replace("11126.00000000", "5118.00000000").replace(
    "Upper bound:                    11172.131", "Lower bound:                    4942.096")
CBC_OPTIMAL = """Result - Optimal solution found

Objective value:                12.00000000
Enumerated nodes:               0
"""


def test_the_bound_is_read_from_cbcs_summary():
    assert cbc_bound(CBC_STOPPED_MAX) == pytest.approx(11172.131)
    assert cbc_bound(CBC_STOPPED_MIN) == pytest.approx(4942.096)
    assert cbc_bound(CBC_OPTIMAL) is None and cbc_bound("") is None
    assert cbc_bound(CBC_STOPPED_MAX.replace("11172.131", "1e+50")) == pytest.approx(1e50)
    assert cbc_bound(CBC_STOPPED_MAX.replace("11172.131", "inf")) is None


def test_cbc_stopped_on_its_time_limit_reports_its_bound():
    """A program CBC cannot prove in a second (300 items, 15 weight limits), started from the empty
    pick so that it holds an answer: a feasible answer with a bound above it, and so a gap, where
    before the bound was lost and the gap printed as 'n/a'."""
    rng = random.Random(1)
    model = Model("pulp")
    picks = [model.bool_var(f"x{i}") for i in range(300)]
    for k in range(15):
        model.add(model.total([rng.randint(1, 99) * x for x in picks]) <= 25 * len(picks), f"w{k}")
    model.set_objective(model.total([rng.randint(10, 99) * x for x in picks]), maximize=True)
    for x in picks:
        x.setInitialValue(0)
    status, objective, bound = model.solve(time_limit_s=1, mip_gap=0.0, warm_start=True)
    assert status is Status.FEASIBLE
    assert objective is not None and bound is not None and objective <= bound < 1.01 * objective
