"""The closed sets a problem chooses from: its objective, what its budget covers, the MIP backend,
and what a hardware group serves (training or serving replicas).

Each member is also its string (``Objective.MIN_TIME == "min_time"``) and prints as that string,
so a member goes into JSON, text and Markdown exactly as the problem file spelled it.
"""

from __future__ import annotations

from enum import Enum


class _Named(str, Enum):
    """A closed set of names that compares and prints as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Objective(_Named):
    """What the MIP optimises: the cheapest cluster that meets the targets, the fastest one the
    budget or power cap allows, or (to find the least power that works) the lowest IT power."""

    MIN_COST = "min_cost"
    MIN_TIME = "min_time"
    MIN_POWER = "min_power"

    @property
    def maximize(self) -> bool:
        """The MIP maximises throughput (min_time); the others minimise a cost."""
        return self is Objective.MIN_TIME


class BudgetCovers(_Named):
    """What a budget bounds: the purchase (capex, plus rent for rented GPUs) or the whole TCO."""

    CAPEX = "capex"
    TCO = "tco"


class Role(_Named):
    """What a hardware group is for: a training job (its servers on a fabric, or one server alone)
    or independent serving replicas (each inside one server)."""

    TRAIN = "train"
    SERVE = "serve"


class Backend(_Named):
    """The MIP solver: OR-Tools (CP-SAT or SCIP) or PuLP (CBC); both solve one formulation."""

    ORTOOLS = "ortools"
    PULP = "pulp"
