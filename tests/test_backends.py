"""The MIP backends' wrapper (``optimizer.milp.backends``): what it hands each solver."""

from __future__ import annotations

import random

import pytest
from ortools.linear_solver import pywraplp

from optimizer.milp import backends
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
    for none_yet in ("1e+50", "-1e+50", "inf", "nan"):  # CBC's infinity: no bound
        assert cbc_bound(CBC_STOPPED_MAX.replace("11172.131", none_yet)) is None


def _knapsacks(relaxed: bool = False) -> Model:
    """300 items under 15 weight limits, worth 10-99 each plus 7 for nothing (a constant term, which
    the program PuLP writes for CBC leaves out): CBC needs about 20 s to prove its optimum."""
    rng = random.Random(1)
    model = Model("pulp")
    if relaxed:
        picks = [model._pulp.LpVariable(f"x{i}", 0, 1) for i in range(300)]
    else:
        picks = [model.bool_var(f"x{i}") for i in range(300)]
    for k in range(15):
        model.add(model.total([rng.randint(1, 99) * x for x in picks]) <= 25 * len(picks), f"w{k}")
    model.set_objective(model.total([rng.randint(10, 99) * x for x in picks]) + 7, maximize=True)
    for x in picks:
        x.setInitialValue(0)  # the empty pick: an answer CBC holds from the start
    return model


def test_cbc_stopped_on_its_time_limit_reports_its_bound():
    """Stopped after a second, CBC holds a feasible answer and a bound on the best one (before, the
    bound was lost and the gap printed as 'n/a'): above the answer and within the LP relaxation's
    value, whatever the machine's speed, the constant term counted on both sides."""
    status, objective, bound = _knapsacks().solve(time_limit_s=1, mip_gap=0.0, warm_start=True)
    _, relaxation, _ = _knapsacks(relaxed=True).solve(time_limit_s=30, mip_gap=0.0)
    assert status is Status.FEASIBLE and relaxation is not None
    assert objective is not None and bound is not None and 7 < objective <= bound <= relaxation + 1e-6


def test_cbcs_bound_counts_the_objectives_constant(monkeypatch):
    """CBC's summary bounds the program without the objective's constant term; the bound returned
    counts it, as PuLP's objective value does."""
    monkeypatch.setattr(backends, "cbc_bound", lambda log: 1000.0)
    status, _, bound = _knapsacks().solve(time_limit_s=1, mip_gap=0.0, warm_start=True)
    assert status is Status.FEASIBLE and bound == pytest.approx(1007.0)
