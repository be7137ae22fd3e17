"""Problem → plans → MIP → a checked recommendation, or an explanation of infeasibility.

After every solve the chosen plan is re-checked by the performance model at the dp the
solver chose, and its hardware is re-priced from the catalog, independently of the solver
(``verify``, built from the ``Check`` records of ``recommend.verify``). An infeasible problem is
explained by the least change of each limit that lifts it (``recommend.repair``).
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.catalog import HOURS_PER_YEAR, Catalog
from optimizer.errors import InfeasibleError, SolverError
from optimizer.milp import MilpSolution, Status, solve
from optimizer.perf.goodput import Goodput, goodput
from optimizer.perf.serve import ServeResult
from optimizer.perf.train import TrainResult
from optimizer.plans import PlanTable
from optimizer.problem import Problem, TrainWorkload
from optimizer.recommend.repair import Repair, feasibility_hints, repairs
from optimizer.recommend.targets import (
    colocation_per_watt,
    electricity_per_watt,
    opex_per_watt,
    plan_table,
    spend,
    targets_of,
)
from optimizer.recommend.verify import (
    Check,
    hardware_checks,
    limit_checks,
    passed,
    used_gpus,
    workload_checks,
)
from optimizer.recommend.walls import Wall, deadline_walls

__all__ = [
    "HOURS_PER_YEAR", "Check", "Recommendation", "Repair", "colocation_per_watt", "deadline_walls",
    "electricity_per_watt", "feasibility_hints", "opex_per_watt", "plan_table", "recommend", "repairs", "spend",
    "targets_of", "verify", "Wall",
]


@dataclass(frozen=True)
class Recommendation:
    problem: Problem
    table: PlanTable
    solution: MilpSolution
    perf: TrainResult | None  # the training re-check at the chosen dp
    checks: tuple[Check, ...]
    replica_perf: tuple[ServeResult, ...] = ()  # the serving re-check, one per replica type used
    phase_perf: tuple[tuple[str, TrainResult], ...] = ()  # several workloads: each training one's re-check

    @property
    def goodput(self) -> Goodput | None:
        """The training job's goodput: its share of wall-clock time left by failures and restarts."""
        c = self.solution.candidate
        if c is None or self.perf is None:
            return None
        reliability = self.table.groups[c.group].reliability(self.problem.reliability)
        return goodput(c.gpus_per_replica * self.solution.dp, reliability)

    @property
    def days(self) -> float:
        """Wall-clock days of a training job: the model's training time over its goodput."""
        good, w = self.goodput, self.problem.workloads[0]
        if self.perf is None or good is None or not isinstance(w, TrainWorkload):
            return 0.0
        return w.tokens / self.perf.tokens_per_s / good.fraction / 86400.0


def verify(problem: Problem, catalog: Catalog, table: PlanTable, sol: MilpSolution) -> Recommendation:
    """Re-check the solver's answer without the solver: every workload's plan re-run by the
    performance model, the hardware re-priced, the power cap and budget compared; the checked
    recommendation, or SolverError naming every check that failed."""
    targets = targets_of(problem)
    trained, checks, served = workload_checks(problem, catalog, table, sol)
    perf = trained[0][1] if len(problem.workloads) == 1 and trained else None
    trained = trained if len(problem.workloads) > 1 else ()
    checks += hardware_checks(problem, targets, table, sol, used_gpus(problem, sol, targets.overlaps))
    checks += limit_checks(problem, sol)
    return Recommendation(problem, table, sol, perf, passed(checks), served, trained)


def recommend(problem: Problem, catalog: Catalog, backend: str | None = None,
              time_limit_s: float | None = None, table: PlanTable | None = None) -> Recommendation:
    """Solve ``problem``; raise InfeasibleError with what would make it feasible."""
    problem = problem.with_time_limit(time_limit_s)  # the answer reports the limit its solve ran under
    limit = problem.solver.time_limit_s
    table = table or plan_table(problem, catalog)
    backend = backend or problem.solver.backend
    targets = targets_of(problem)
    if not table.candidates and not table.serving:
        reasons = [f"{gpu}: {why}" for gpu, why in sorted(table.gpu_reasons.items())]
        hints = feasibility_hints(problem, catalog, table, backend, limit, fallback=False)
        models = " and ".join(dict.fromkeys(w.model_id for w in problem.workloads))
        raise InfeasibleError(f"no GPU in the catalog can run {models} under this problem's limits:",
                              reasons + hints)
    sol = solve(table, targets, backend, limit, problem.solver.mip_gap)
    if sol.status == Status.NO_SOLUTION:
        raise SolverError(f"no solution found within {limit:g} s. To fix: raise --time-limit, or solver.time_limit_s "
                          "in the problem file.")
    if sol.status == Status.INFEASIBLE:
        raise InfeasibleError(f"no cluster meets every target of '{problem.name}'.",
                              feasibility_hints(problem, catalog, table, backend, limit))
    return verify(problem, catalog, table, sol)
