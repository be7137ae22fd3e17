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

from optimizer.errors import SolverError
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
from optimizer.milp.program import Program, Solved
from optimizer.milp.screen import one_job, screen_groups
from optimizer.milp.solution import MilpSolution, Status
from optimizer.plans import Candidate, PlanTable
from optimizer.problem.enums import Backend, Objective

__all__ = [
    "BACKENDS", "ORTOOLS_ENGINE", "MilpSolution", "Status", "replica_bound", "solve",
    # re-exported from optimizer.milp.costs
    "Costs", "GroupCount", "Targets", "capex_parts", "fabric_links", "group_costs", "job_gpu_hours",
    "least_purchases", "network_switches", "purchase", "racks_needed", "rent_cost", "solution_costs",
]



def solve(table: PlanTable, targets: Targets, backend: Backend | str = Backend.ORTOOLS, time_limit_s: float = 60.0,
          mip_gap: float = 1e-6, tie_break: bool = True) -> MilpSolution:
    """Build the program over ``table`` and solve it. Same signature for both backends. A second
    pass fixes the optimum and takes, among equally good answers, the cheapest (min_time, min_power)
    or the one with the fastest training plus the most serving capacity (min_cost)."""
    if not table.candidates and not table.serving:
        raise SolverError("no candidate plans to choose from")
    start = time.perf_counter()
    solved: Solved | None = None
    if one_job(table):
        table, solved = screen_groups(table, targets, backend, time_limit_s, mip_gap)
        if not table.candidates:
            return _empty(Status.INFEASIBLE, Backend(backend), start, None)
    if solved is None:  # else the one group left was solved while screening: its program is the program
        program = Program(table, targets, backend)
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
        if _tie_break(program, targets, objective, remaining, mip_gap):
            values = program.values()
    return _solution(table, targets, values, status, model.backend, objective, bound, gap, start, model)


def _tie_break(program: Program, targets: Targets, objective: float, time_limit_s: float, mip_gap: float) -> bool:
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
        # the fastest training and the most serving capacity (both tokens/s): a problem that trains
        # and serves would otherwise take any serving layout the training's purchases leave room for
        model.set_objective(program.throughput + program.capacity, True)
    second, _, _ = model.solve(time_limit_s, mip_gap, warm_start=True)
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
