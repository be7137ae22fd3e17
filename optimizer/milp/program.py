"""The built program: the formulation's variables and constraints over a plan table, with the
expressions the objectives use (``optimizer.milp.formulation``), on either backend."""

from __future__ import annotations

from optimizer.milp import formulation as f
from optimizer.milp.backends import Model
from optimizer.milp.costs import Targets
from optimizer.milp.solution import Status
from optimizer.plans import PlanTable
from optimizer.problem.enums import Backend, Objective


class Program:
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



Solved = tuple[Program, Status, float | None, float | None]  # a program and how its objective solved
