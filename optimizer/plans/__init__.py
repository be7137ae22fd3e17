"""Stage 4: candidate plans the MIP chooses from, with the reason for everything dropped.

``plans.groups`` defines the hardware groups (GPU × server × fabric, bought, owned or rented);
``plans.train`` enumerates training templates (one is chosen, with its data-parallel degree);
``plans.serve`` enumerates serving replica types (integer counts of several may be mixed);
``plans.table`` holds what the solver sees and prunes dominated candidates exactly.
"""

from __future__ import annotations

from typing_extensions import assert_never

from optimizer.catalog import Catalog
from optimizer.plans.groups import (
    Group,
    build_groups,
    group_affordable,
    group_reason,
    leaf_split,
    licence_reason,
    licensed_gpus,
    max_gpus,
    no_group_reason,
)
from optimizer.plans.serve import enumerate_serving
from optimizer.plans.table import (
    Candidate,
    PlanTable,
    ServeCandidate,
    dominates,
    prune_dominated,
    prune_serving,
    restrict,
    serve_dominates,
)
from optimizer.plans.train import enumerate_plans, with_memory
from optimizer.problem import Problem, ServeWorkload, TrainWorkload

__all__ = ["Candidate", "Group", "PlanTable", "ServeCandidate", "build_groups", "dominates", "enumerate_candidates",
           "enumerate_plans", "enumerate_serving", "group_affordable", "group_reason", "leaf_split", "licence_reason",
           "licensed_gpus", "max_gpus", "no_group_reason", "prune_dominated", "prune_serving", "restrict",
           "serve_dominates", "with_memory"]


def enumerate_candidates(problem: Problem, catalog: Catalog) -> PlanTable:
    """The candidates for ``problem``'s one workload: training templates or serving replica types."""
    match problem.workload:
        case TrainWorkload():
            return enumerate_plans(problem, catalog)
        case ServeWorkload():
            return enumerate_serving(problem, catalog)
        case never:
            assert_never(never)
