"""What would make an infeasible problem feasible: the least budget, power cap or deadline
(each found by one relaxed MIP), and, past the deadline, the walls in the order they bind
(``recommend.walls``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from optimizer.catalog import Catalog
from optimizer.milp import MilpSolution, Targets
from optimizer.plans import PlanTable
from optimizer.problem import Problem
from optimizer.problem.enums import BudgetCovers, Objective
from optimizer.recommend.targets import plan_table, targets_of
from optimizer.recommend.walls import deadline_walls, fastest, solve_if_any


@dataclass(frozen=True)
class Repair:
    """The smallest change of one limit that makes a problem feasible, with the others unchanged."""

    limit: str  # budget | power | deadline
    current: float  # USD, W or seconds
    needed: float  # the least (budget, power) or the shortest (deadline) that works, rounded up

    def apply(self, problem: Problem) -> Problem:
        field = {"budget": "budget_usd", "power": "power_cap_w", "deadline": "deadline_s"}[self.limit]
        return problem.with_workload(deadline_s=self.needed) if field == "deadline_s" else \
            problem.with_limits(**{field: self.needed})

    def enough(self, problem: Problem) -> str:
        """The repair in a clause, for the wall of the same limit (budget or power cap)."""
        if self.limit == "budget":
            return (f"${self.needed:,.0f} of {_spend(problem)} (+${self.needed - self.current:,.0f}) meets every "
                    "other target")
        return (f"{problem.power_text(self.needed)} (+{(self.needed - self.current) / 1e3:,.2f} kW of IT power) "
                "meets every other target")

    def describe(self, problem: Problem) -> str:
        if self.limit == "budget":
            return (f"budget: the least {_spend(problem)} that meets the other targets is ${self.needed:,.0f}; "
                    f"the budget is ${self.current:,.0f} (+${self.needed - self.current:,.0f})")
        if self.limit == "power":
            if problem.facility_power_cap_w is None:
                return (f"power: the least IT power that meets the other targets is {self.needed / 1e3:,.2f} kW; "
                        f"the cap is {self.current / 1e3:,.1f} kW (+{(self.needed - self.current) / 1e3:,.2f} kW)")
            return (f"power: the least power that meets the other targets is {problem.power_text(self.needed)}; "
                    f"the cap is {problem.power_text(self.current)} ({problem.power_field}; "
                    f"+{(self.needed - self.current) / 1e3:,.2f} kW of IT power)")
        return (f"deadline: the fastest cluster within the other limits takes {self.needed / 86400:,.3f} days; "
                f"the deadline is {self.current / 86400:,.1f} days (+{(self.needed - self.current) / 86400:,.3f} days)")


def _spend(problem: Problem) -> str:
    """What the budget counts: capex and rent (milp.formulation.add_budget), or the TCO."""
    return "capex and rent" if problem.budget_covers is BudgetCovers.CAPEX else "TCO"


def repairs(problem: Problem, catalog: Catalog, table: PlanTable, backend: str, limit: float) -> list[Repair]:
    """For each of budget, power cap and deadline the problem has: the smallest value that makes it
    feasible with the other limits kept, found by one MIP each.

    The budget: minimise capex (or TCO, if that is what the budget covers) without the budget;
    the power cap: minimise IT power without the cap; the deadline: maximise tokens/s without it.
    Plans are re-enumerated without a relaxed budget or cap, which also bound each plan's GPUs.
    Values are rounded up ($1, 10 W, 0.001 day) so that applying them is feasible.
    """
    out = []
    targets = targets_of(problem)
    if problem.budget_usd is not None:
        capex_only = problem.budget_covers is BudgetCovers.CAPEX
        relaxed = replace(targets, budget_usd=None, objective=Objective.MIN_COST)
        if capex_only:
            relaxed = replace(relaxed, opex_usd_per_w=0.0, maintenance=0.0)
        needed = _least(problem, catalog, "budget_usd", relaxed, backend, limit,
                        lambda s: math.ceil(s.capex + s.rent if capex_only else s.tco))
        if needed is not None:
            out.append(Repair("budget", problem.budget_usd, needed))
    if problem.power_cap_w is not None:
        relaxed = replace(targets, power_cap_w=None, objective=Objective.MIN_POWER)
        needed = _least(problem, catalog, "power_cap_w", relaxed, backend, limit,
                        lambda s: math.ceil(s.power_w / 10) * 10.0)
        if needed is not None:
            out.append(Repair("power", problem.power_cap_w, needed))
    job = problem.training
    if job is not None and job.deadline_s is not None:
        s = fastest(problem, table, backend, limit)
        if s is not None:
            days = math.ceil(job.tokens / s.tokens_per_s / 86.4) / 1000
            out.append(Repair("deadline", job.deadline_s, days * 86400))
    return out


def _least(problem: Problem, catalog: Catalog, field: str, relaxed: Targets, backend: str, limit: float,
           measure: Callable[[MilpSolution], float]) -> float | None:
    """The least value of a limit (budget or power cap) at which the problem is feasible.

    A first solve without the limit gives a value v; but plans enumerated under a limit v are
    less conservative than without it (their data-parallel bands end at fewer GPUs), so a
    smaller value may already work: re-solve over the table enumerated at v until it is stable.
    """
    value: float | None = None
    for _ in range(6):
        table = plan_table(problem.with_limits(**{field: value}), catalog)
        s = solve_if_any(table, relaxed, backend, limit, problem)
        if s is None:
            return value
        fresh = float(measure(s))
        if value is not None and fresh >= value:
            return value
        value = fresh
    return value


def feasibility_hints(problem: Problem, catalog: Catalog, table: PlanTable, backend: str, limit: float,
                      fallback: bool = True, found: list[Repair] | None = None) -> list[str]:
    """What makes the problem feasible: each single relaxation of the budget or power cap that
    does, priced by a re-solve; past the deadline, every wall in the order they bind. ``found``:
    the problem's repairs if the caller has them already."""
    found = repairs(problem, catalog, table, backend, limit) if found is None else found
    single = {r.limit: r for r in found if r.limit != "deadline"}
    late = next((r for r in found if r.limit == "deadline"), None)
    walls = deadline_walls(problem, catalog, backend, limit, late.needed / 86400) if late is not None else []
    # a limit that is both a wall and a single repair is named once: the wall, with the repair's figure
    for_wall = {w.limit: single.pop(w.limit).enough(problem) for w in walls if w.limit in single}
    hints = [r.describe(problem) for r in single.values()]
    hints += [w.text + (f"; {for_wall[w.limit]}" if w.limit in for_wall else "") for w in walls]
    if late is not None and not walls:
        hints.append(late.describe(problem))
    if not hints and fallback:
        hints.append("no single relaxation of budget, power or deadline helps: allow more GPUs "
                     "(hardware.max_gpus), a larger global batch, or more GPU types")
    return hints
