"""Stage 5: one mixed-integer program over the candidate plans and the integer infrastructure.

The formulation (sets, data, variables, constraints (1)-(16), objectives) is written out in
``optimizer.milp.formulation``, one ``add_*`` function per numbered constraint; ``backends`` holds
the OR-Tools and PuLP adapters, ``costs`` the closed forms every answer is re-priced with, and
``solution`` what a solve returns. ``solve`` below builds the program, solves it, breaks ties and
reads the answer back.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from optimizer.errors import SolverError
from optimizer.milp import formulation as f
from optimizer.milp.backends import BACKENDS, ORTOOLS_ENGINE, Model
from optimizer.milp.costs import (  # re-exported (see __all__): the closed forms the MIP is checked against
    Costs,
    GroupCount,
    Targets,
    capex_parts,
    fabric_links,
    group_costs,
    job_gpu_hours,
    least_purchases,
    network_switches,
    purchase,
    racks_needed,
    rent_cost,
    solution_costs,
)
from optimizer.milp.formulation import replica_bound
from optimizer.milp.solution import MilpSolution, Status
from optimizer.plans import Candidate, PlanTable
from optimizer.problem.enums import Backend, Objective

__all__ = [
    "BACKENDS", "ORTOOLS_ENGINE", "MilpSolution", "Status", "replica_bound", "solve",
    # re-exported from optimizer.milp.costs
    "Costs", "GroupCount", "Targets", "capex_parts", "fabric_links", "group_costs", "job_gpu_hours",
    "least_purchases", "network_switches", "purchase", "racks_needed", "rent_cost", "solution_costs",
]


class _Program:
    """The built program: the model, its variables, and the expressions the objectives use."""

    def __init__(self, table: PlanTable, targets: Targets, backend: Backend | str) -> None:
        self.model = model = Model(backend)
        bounds = f.group_bounds(table, targets)
        self.v = v = f.variables(model, table, targets, bounds)
        f.add_one_plan(model, table, v)  # (1)
        f.add_dp_range(model, table, v)  # (2)
        terms = f.add_groups(model, table, targets, bounds, v)  # (3), (4), (13), (14), (6)
        f.add_pools(model, table, v)  # (13)
        f.add_caps(model, table, targets, terms)  # (15)
        self.power = model.total(terms.power)  # (10)
        f.add_racks(model, table, targets, bounds, v, terms, self.power)  # (16)
        f.add_demands(model, table, targets, v)  # (12)
        self.throughput = model.total([c.replica_tokens_per_s * v.dp[c.key] for c in table.candidates])  # (7)
        self.capacity = model.total([r.tokens_per_s * v.n[r.key] for r in table.serving])
        capex = model.total(terms.capex)  # (9)
        rent = model.total(terms.rent)  # (14)
        self.tco = (capex + targets.opex_usd_per_w * self.power + targets.maintenance * model.total(terms.value)
                    + rent)
        f.add_deadlines(model, table, targets, v)  # (8)
        f.add_power_cap(model, targets, self.power)  # (10)
        f.add_budget(model, targets, capex + rent, self.tco)  # (11)

    def optimise(self, targets: Targets, time_limit_s: float, mip_gap: float) -> tuple[Status, float | None,
                                                                                      float | None]:
        """Solve for the problem's objective: (status, objective, best bound)."""
        goals = {Objective.MIN_TIME: self.throughput, Objective.MIN_POWER: self.power}
        self.model.set_objective(goals.get(targets.objective, self.tco), targets.objective.maximize)
        return self.model.solve(time_limit_s, mip_gap)

    def values(self) -> dict[tuple[str, str], float]:
        return {(name, k): self.model.value(var) for name, family in self.v.read_back().items()
                for k, var in family.items()}



Solved = tuple[_Program, Status, float | None, float | None]  # a program and how its objective solved

def solve(table: PlanTable, targets: Targets, backend: Backend | str = Backend.ORTOOLS, time_limit_s: float = 60.0,
          mip_gap: float = 1e-6, tie_break: bool = True) -> MilpSolution:
    """Build the program over ``table`` and solve it. Same signature for both backends. A second
    pass fixes the optimum and takes, among equally good answers, the cheapest (min_time, min_power)
    or the fastest / most capacity (min_cost)."""
    if not table.candidates and not table.serving:
        raise SolverError("no candidate plans to choose from")
    start = time.perf_counter()
    solved: Solved | None = None
    if _one_job(table):
        table, solved = screen_groups(table, targets, backend, time_limit_s, mip_gap)
        if not table.candidates:
            return _empty(Status.INFEASIBLE, Backend(backend), start, None)
    if solved is None:  # else the one group left was solved while screening: its program is the program
        program = _Program(table, targets, backend)
        left = max(1.0, time_limit_s - (time.perf_counter() - start))
        solved = program, *program.optimise(targets, left, mip_gap)
    program, status, objective, bound = solved
    model = program.model
    if status in (Status.INFEASIBLE, Status.NO_SOLUTION):
        return _empty(status, model.backend, start, model)
    gap = _gap(objective, bound) if bound is not None else (mip_gap if status == Status.OPTIMAL else None)
    values = program.values()
    if tie_break and objective is not None:
        remaining = max(1.0, time_limit_s - (time.perf_counter() - start))
        if _tie_break(program, table, targets, objective, remaining, mip_gap):
            values = program.values()
    return _solution(table, targets, values, status, model.backend, objective, bound, gap, start, model)


def _tie_break(program: _Program, table: PlanTable, targets: Targets, objective: float, time_limit_s: float,
               mip_gap: float) -> bool:
    """Fix the optimum (within a relative 1e-7) and optimise the second criterion; True if that
    pass was proven optimal (a pass stopped by the clock is discarded: keeps output deterministic)."""
    model = program.model
    slack = 1e-7 * max(1.0, abs(objective))
    if targets.objective is Objective.MIN_TIME:
        model.add(program.throughput >= objective - slack, "tie_break_throughput")
        model.set_objective(program.tco, False)
    elif targets.objective is Objective.MIN_POWER:
        model.add(program.power <= objective + slack, "tie_break_power")
        model.set_objective(program.tco, False)
    else:
        model.add(program.tco <= objective + slack, "tie_break_cost")
        model.set_objective(program.throughput if table.candidates else program.capacity, True)
    second, _, _ = model.solve(time_limit_s, mip_gap)
    return second == Status.OPTIMAL


def _solution(table: PlanTable, targets: Targets, values: dict[tuple[str, str], float], status: Status,
              backend: Backend, objective: float | None, bound: float | None, gap: float | None, start: float,
              model: Model) -> MilpSolution:
    """The solution read back from the variables' values, priced in closed form."""
    chosen = [c for c in table.candidates if values["x", c.key] > 0.5]
    trained = {c.workload for c in table.candidates}
    if sorted(c.workload for c in chosen) != sorted(trained):
        raise SolverError(f"the solver selected {len(chosen)} training plans; expected one for each of "
                          f"{len(trained)} training workload(s)")
    plans = tuple((p, round(values["dp", p.key])) for p in chosen)
    first: Candidate | None
    first, dp_value = plans[0] if plans else (None, 0)
    replicas = tuple((r, round(values["n", r.key])) for r in table.serving if round(values["n", r.key]) > 0)
    for h, g in table.groups.items():  # a rented group's instances cost nothing apart from its GPUs
        if g.rented:
            values["S", h] = math.ceil(round(values["G", h]) / g.slots)
    purchases = tuple(GroupCount(h, round(values["G", h]), round(values["S", h]),
                                 round(values.get(("L", h), 0.0)), round(values.get(("K", h), 0.0)),
                                 round(values.get(("OG", h), 0.0)), round(values.get(("OS", h), 0.0)))
                      for h in sorted(table.groups) if round(values["G", h]) > 0)
    costs = solution_costs(table, targets, purchases, tuple(chosen))
    return MilpSolution(status, backend, objective, bound, gap, first, dp_value, replicas, purchases,
                        first.replica_tokens_per_s * dp_value if first else 0.0, costs.capex, costs.power_w,
                        costs.opex(targets), time.perf_counter() - start, model.n_vars, model.n_cons, costs,
                        plans)


def _gap(objective: float | None, bound: float | None) -> float | None:
    if objective is None or bound is None:
        return None
    return abs(bound - objective) / max(1e-9, abs(objective))


def _empty(status: Status, backend: Backend, start: float, model: Model | None) -> MilpSolution:
    return MilpSolution(status, backend, None, None, None, None, 0, (), (), 0.0, 0.0, 0.0, 0.0,
                        time.perf_counter() - start, model.n_vars if model else 0, model.n_cons if model else 0)


def _one_job(table: PlanTable) -> bool:
    """One training workload and nothing served: every answer uses one hardware group."""
    return not table.serving and len({c.workload for c in table.candidates}) == 1 and len(table.groups) > 1


SCREEN_TOLERANCE = 1e-4  # groups this close to the best (relative) are solved together, for the tie-break


def screen_groups(table: PlanTable, targets: Targets, backend: Backend | str, time_limit_s: float,
                  mip_gap: float) -> tuple[PlanTable, Solved | None]:
    """The table restricted to the hardware groups that can hold the optimum of a problem with one
    training job and no serving (exact: any answer runs its one plan on one group, and leaving the
    other groups empty keeps it feasible at no worse objective, so the optimum is the best of the
    groups' own optima, and no program need hold every group at once).

    Each group is solved alone for the objective; for the fastest answer (min_time) groups are
    taken by an upper bound on their throughput (a plan's rate at its most dp) and skipped once
    that bound is below the best found. What is returned holds every group within
    ``SCREEN_TOLERANCE`` of the best and every group not proven worse (stopped by the clock), so
    that solving it, tie-break included, gives the answer the program over every group gives; and
    when that is one group, its program as solved (status, objective, bound), to go on from."""
    start = time.perf_counter()
    programs: dict[str, Solved] = {}
    by_group: dict[str, list[Candidate]] = {}
    for c in table.candidates:
        by_group.setdefault(c.group, []).append(c)
    maximize = targets.objective.maximize
    upper = {h: max(c.replica_tokens_per_s * c.dp_max for c in cands) for h, cands in by_group.items()}
    fastest = targets.objective is Objective.MIN_TIME
    order = sorted(by_group, key=lambda h: (-upper[h], h)) if fastest else sorted(by_group)
    solved: dict[str, float] = {}
    unproven: set[str] = set()
    for h in order:
        best = max(solved.values(), default=None) if maximize else min(solved.values(), default=None)
        if fastest and best is not None and upper[h] < best - SCREEN_TOLERANCE * abs(best):
            break  # the rest are bounded lower still
        left = time_limit_s - (time.perf_counter() - start)
        if left <= 0:
            unproven.add(h)
            continue
        one = replace(table, candidates=tuple(by_group[h]), groups={h: table.groups[h]})
        program = _Program(one, targets, backend)
        status, objective, bound = program.optimise(targets, max(1.0, left), mip_gap)
        if status is Status.OPTIMAL and objective is not None:
            solved[h] = objective
            programs[h] = (program, status, objective, bound)
        elif status is not Status.INFEASIBLE:
            unproven.add(h)
    keep = set(unproven)
    if solved:
        best = max(solved.values()) if maximize else min(solved.values())
        slack = SCREEN_TOLERANCE * max(1.0, abs(best))
        keep |= {h for h, v in solved.items() if (v >= best - slack if maximize else v <= best + slack)}
    kept = replace(table, candidates=tuple(c for c in table.candidates if c.group in keep),
                   groups={h: g for h, g in table.groups.items() if h in keep})
    return kept, programs[next(iter(keep))] if len(keep) == 1 and not unproven else None
