"""Stage 2: load and validate a problem file into a frozen ``Problem``.

A problem holds its workloads (``Problem.workloads``: a ``TrainWorkload``, with its model, tokens
and deadline, or a ``ServeWorkload``, with its model and request classes; one named "", or several,
each in its time window), the objective (``min_cost`` under a deadline, or ``min_time`` under a
budget), the site (power cap, whether it is a data centre), which GPUs are allowed, the plan
search grid, and the solver options. Stages dispatch on the workload's type, never on a string.
Catalog entries are referred to by id; their numbers are never copied here.
"""

from optimizer.problem.enums import Backend, BudgetCovers, Objective
from optimizer.problem.model import Demand, Limits, Problem, ServeWorkload, TrainWorkload, Workload
from optimizer.problem.resolve import (
    PHASE_FIELDS,
    answer_regime,
    confidence_factor,
    load_priced,
    load_problem,
    problem_from_data,
    resolve_model,
    serve_regime,
    tp_fits,
    with_prices,
)
from optimizer.problem.schema import SCHEMA_VERSION, ProblemFile, Search, SolverOptions

__all__ = [
    "answer_regime",
    "Backend",
    "BudgetCovers",
    "confidence_factor",
    "Demand",
    "Limits",
    "load_priced",
    "load_problem",
    "Objective",
    "PHASE_FIELDS",
    "Problem",
    "problem_from_data",
    "ProblemFile",
    "resolve_model",
    "SCHEMA_VERSION",
    "Search",
    "ServeWorkload",
    "serve_regime",
    "SolverOptions",
    "tp_fits",
    "TrainWorkload",
    "with_prices",
    "Workload",
]
