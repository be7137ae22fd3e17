"""The independent re-check (recommend.verify): every condition is a Check record that holds for a
solved answer, and an answer the solver got wrong is refused with every failed check named."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optimizer.errors import SolverError
from optimizer.problem import load_priced
from optimizer.recommend import Check, plan_table, recommend, verify
from optimizer.recommend.verify import at_least, at_most, passed
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def training(catalog):
    problem, priced = load_priced(ROOT / "problems" / "lab_quotes.yaml", catalog)
    return recommend(problem, priced, table=plan_table(problem, priced)), priced


def test_a_solved_answer_passes_every_check(training):
    rec, _ = training
    assert rec.checks and all(isinstance(c, Check) and c.ok for c in rec.checks)
    whats = [c.what for c in rec.checks]
    assert whats[:3] == ["memory", "throughput", "global_batch"]
    assert "hardware" in whats and "budget" in whats
    budget = next(c for c in rec.checks if c.what == "budget")
    assert budget.measured <= budget.limit == rec.problem.budget_usd
    assert budget.text.startswith("capex $") and budget.text.endswith(f"≤ budget ${budget.limit:,.0f}")


def test_a_wrong_answer_is_refused_naming_each_failed_check(training):
    """A solution whose sums disagree with the catalog (capex) and whose plan runs past the budget
    fails two checks; the error names both."""
    rec, priced = training
    sol = replace(rec.solution, capex=rec.solution.capex * 3)
    with pytest.raises(SolverError) as err:
        verify(rec.problem, priced, rec.table, sol)
    text = str(err.value)
    assert "failed the independent re-check" in text
    assert "hardware re-priced from the catalog" in text and "≤ budget" in text


def test_limits_hold_within_a_relative_slack():
    assert at_most("power", 1000.0 * (1 + 1e-10), 1000.0, "").ok
    assert not at_most("power", 1000.1, 1000.0, "").ok
    assert at_least("demand", 999.9999999, 1000.0, "").ok
    assert not at_least("demand", 999.0, 1000.0, "").ok
    ok = Check(what="memory", ok=True, measured=1.0, limit=2.0, text="fits")
    assert passed([ok]) == (ok,) and ok.named("chat").text == "chat: fits"
    with pytest.raises(SolverError, match="too big; too slow"):
        passed([replace(ok, ok=False, text="too big"), ok, replace(ok, ok=False, text="too slow")])


def test_closed_sets_are_enums_that_print_as_their_file_values(catalog, training):
    """Objective, what the budget covers and the backend are enums; each compares, prints and
    serialises as the string the problem file uses, so outputs are unchanged."""
    import json

    from optimizer.milp.backends import Model
    from optimizer.problem import Backend, BudgetCovers, Objective

    rec, _ = training
    p = rec.problem
    assert p.objective is Objective.MIN_TIME and p.objective.maximize and not Objective.MIN_COST.maximize
    assert p.budget_covers is BudgetCovers.CAPEX and p.solver.backend is Backend.ORTOOLS
    assert rec.solution.backend is Backend.ORTOOLS
    assert f"{p.objective}|{p.objective:>9}|{p.budget_covers}" == "min_time| min_time|capex"
    assert json.dumps([p.objective, p.solver.backend]) == '["min_time", "ortools"]'
    assert Objective("min_cost") == "min_cost" and Backend("pulp") is Backend.PULP
    with pytest.raises(SolverError, match="unknown solver backend 'cplex'. To fix: use one of ortools, pulp"):
        Model("cplex")
    from optimizer.problem.enums import Role

    group = rec.table.groups[rec.solution.candidate.group]
    assert group.role is Role.TRAIN and replace(group, role="serve").role is Role.SERVE
    assert replace(group, fabric=None, role="serve").key.endswith("/replicas")
