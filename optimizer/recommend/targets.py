"""What a problem asks of the solver: its targets, its candidate plans, and the money per watt.

``targets_of`` turns a problem into the MIP's ``Targets`` (objective, limits, demands, jobs and
which workloads overlap); ``plan_table`` enumerates its candidates; the per-watt figures price a
watt of IT load over the horizon (electricity × load factor × PUE, and colocation rent).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from typing_extensions import assert_never

from optimizer.catalog import HOURS_PER_YEAR, Catalog
from optimizer.milp import MilpSolution, Targets
from optimizer.plans import PlanTable, enumerate_candidates
from optimizer.plans.portfolio import enumerate_portfolio, overlaps
from optimizer.problem import Problem, ServeWorkload, TrainWorkload
from optimizer.problem.enums import BudgetCovers


def electricity_per_watt(problem: Problem) -> float:
    """USD of electricity over the horizon per watt of IT load (load factor × PUE × hours × price)."""
    return (problem.load_factor * problem.pue * problem.horizon_years * HOURS_PER_YEAR
            * problem.electricity_usd_per_kwh / 1000.0)


def colocation_per_watt(problem: Problem) -> float:
    """USD of colocation rent over the horizon per watt of IT capacity ($/kW-month × months / 1000)."""
    return problem.colocation_usd_per_kw_month * 12 * problem.horizon_years / 1000.0


def opex_per_watt(problem: Problem) -> float:
    """USD over the horizon per watt of on-site IT load: electricity and colocation."""
    return electricity_per_watt(problem) + colocation_per_watt(problem)


def targets_of(problem: Problem) -> Targets:
    """The MIP's targets: one training job's tokens and deadline, or the request classes to serve;
    with several workloads every class (``workload/class``), every job and which run together."""
    servers = tuple((k, v) for k, v in problem.max_units if k not in problem.gpus)
    targets = Targets(problem.objective, 0.0, None, problem.budget_usd,
                      problem.budget_covers, problem.power_cap_w, opex_per_watt(problem), (),
                      problem.maintenance_per_year * problem.horizon_years, problem.installation_usd_per_server,
                      problem.racks, servers)
    if len(problem.workloads) > 1:
        ws = problem.workloads
        return replace(targets, demands=tuple((f"{w.name}/{d.name}", d.output_tokens_per_s) for w in ws
                                              if isinstance(w, ServeWorkload) for d in w.demands),
                       jobs=tuple((w.name, w.tokens, w.deadline_s) for w in ws if isinstance(w, TrainWorkload)),
                       overlaps=overlaps(ws))
    match problem.workload:
        case TrainWorkload() as w:
            return replace(targets, tokens=w.tokens, deadline_s=w.deadline_s)
        case ServeWorkload() as w:
            return replace(targets, demands=tuple((d.name, d.output_tokens_per_s) for d in w.demands))
        case never:
            assert_never(never)


_TABLES: OrderedDict[Problem, tuple[Catalog, PlanTable]] = OrderedDict()
TABLES_KEPT = 4  # the last few problems' tables, per process


def plan_table(problem: Problem, catalog: Catalog) -> PlanTable:
    """The candidates of ``problem``: its workload's, or every workload's on shared hardware.

    Enumeration is a pure function of the problem and the catalog, and the relaxations that
    explain an infeasible answer come back to the same problem (without its budget for the
    least budget, then without budget and power cap for the walls): the last few tables are
    kept and handed out again for an equal problem on the very same catalog object."""
    kept = _TABLES.get(problem)
    if kept is not None and kept[0] is catalog:
        _TABLES.move_to_end(problem)
        return kept[1]
    several = len(problem.workloads) > 1
    table = enumerate_portfolio(problem, catalog) if several else enumerate_candidates(problem, catalog)
    _TABLES[problem] = (catalog, table)
    while len(_TABLES) > TABLES_KEPT:
        _TABLES.popitem(last=False)
    return table


def spend(problem: Problem, sol: MilpSolution) -> float:
    """What the budget bounds: capex and rent, or the whole TCO."""
    return sol.tco if problem.budget_covers is BudgetCovers.TCO else sol.capex + sol.rent
