"""What a MIP solve returns: its status and, when it found one, the chosen plans, counts and costs."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from optimizer.milp.costs import Costs, GroupCount
from optimizer.plans import Candidate, ServeCandidate
from optimizer.problem.enums import Backend


class Status(enum.Enum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible (time limit; not proven optimal)"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no solution found within the time limit"


@dataclass(frozen=True)
class MilpSolution:
    status: Status
    backend: Backend
    objective: float | None
    bound: float | None
    gap: float | None
    candidate: Candidate | None  # the training plan, if the problem trains
    dp: int
    replicas: tuple[tuple[ServeCandidate, int], ...]  # serving replica types used, with counts
    purchases: tuple[GroupCount, ...]  # every hardware group bought, by key
    tokens_per_s: float  # training throughput
    capex: float
    power_w: float
    opex: float  # electricity, colocation and maintenance over the horizon
    solve_seconds: float
    variables: int
    constraints: int
    costs: Costs | None = None  # every term, None when there is no solution
    plans: tuple[tuple[Candidate, int], ...] = ()  # every training plan chosen with its dp (one per workload)

    @property
    def rent(self) -> float:
        return self.costs.rent if self.costs is not None else 0.0

    @property
    def tco(self) -> float:
        return self.capex + self.opex + self.rent

    @property
    def counts(self) -> GroupCount | None:
        """What the training plan's group buys."""
        if self.candidate is None:
            return None
        return next((p for p in self.purchases if p.group == self.candidate.group), None)

    def usage(self) -> dict[str, dict[str, int]]:
        """GPUs each workload uses, per group: workload -> group -> GPUs ('' with one workload)."""
        out: dict[str, dict[str, int]] = {}
        for c, dp in self.plans:
            mine = out.setdefault(c.workload, {})
            mine[c.group] = mine.get(c.group, 0) + c.gpus_per_replica * dp
        for r, n in self.replicas:
            mine = out.setdefault(r.workload, {})
            mine[r.group] = mine.get(r.group, 0) + r.gpus_per_replica * n
        return out

    def serving_capacity(self) -> dict[str, float]:
        """Output tokens/s per request class."""
        out: dict[str, float] = {}
        for r, n in self.replicas:
            out[r.demand] = out.get(r.demand, 0.0) + r.tokens_per_s * n
        return out
