"""Screening hardware groups: a problem with one training job and nothing served is solved group
by group, and the one program holds only the groups that can hold its optimum."""

from __future__ import annotations

import math
import time
from dataclasses import replace

from optimizer.milp.costs import Targets, job_gpu_hours
from optimizer.milp.program import Program, Solved
from optimizer.milp.solution import Status
from optimizer.plans import Candidate, Group, PlanTable
from optimizer.problem.enums import Backend, Objective


def one_job(table: PlanTable) -> bool:
    """One training workload and nothing served: every answer uses one hardware group."""
    return not table.serving and len({c.workload for c in table.candidates}) == 1 and len(table.groups) > 1


SCREEN_TOLERANCE = 1e-4  # groups this close to the best (relative) are solved together, for the tie-break


def screen_groups(table: PlanTable, targets: Targets, backend: Backend | str, time_limit_s: float,
                  mip_gap: float) -> tuple[PlanTable, Solved | None]:
    """The table restricted to the hardware groups that can hold the optimum of a problem with one
    training job and no serving (exact: any answer runs its one plan on one group, and leaving the
    other groups empty keeps it feasible at no worse objective, so the optimum is the best of the
    groups' own optima, and no program need hold every group at once).

    Each group is solved alone for the objective, in order of a bound on what it can reach (the
    fastest answer: its best plan's rate at its most dp or the GPUs the budget buys, ``_bound``; the
    cheapest: what the GPUs the deadline needs cost at least, ``_cost_floor``), and the rest are
    skipped once the bound is worse than the best found. What is returned holds every group within
    ``SCREEN_TOLERANCE`` (or twice the MIP gap, if larger) of the best and every group not proven
    worse (stopped by the clock), so that solving it, tie-break included, gives the answer the
    program over every group gives; and when that is one group, its program as solved (status,
    objective, bound), to go on from."""
    start = time.perf_counter()
    programs: dict[str, Solved] = {}
    by_group: dict[str, list[Candidate]] = {}
    for c in table.candidates:
        by_group.setdefault(c.group, []).append(c)
    maximize = targets.objective.maximize
    tolerance = max(SCREEN_TOLERANCE, 2.0 * mip_gap)
    reach = {h: _bound(cands, table.groups[h], targets) for h, cands in by_group.items()}
    order = sorted(by_group, key=lambda h: (-reach[h] if maximize else reach[h], h))
    solved: dict[str, float] = {}
    unproven: set[str] = set()
    for h in order:
        best = max(solved.values(), default=None) if maximize else min(solved.values(), default=None)
        if best is not None and _worse(reach[h], best, maximize, tolerance):
            break  # the rest are bounded worse still
        if math.isinf(reach[h]) and not maximize:
            break  # no plan of this group (or any after it) meets the deadline within its dp range
        left = time_limit_s - (time.perf_counter() - start)
        if left <= 0:
            unproven.add(h)
            continue
        one = replace(table, candidates=tuple(by_group[h]), groups={h: table.groups[h]})
        program = Program(one, targets, backend)
        status, objective, bound = program.optimise(targets, max(1.0, left), mip_gap)
        if status is Status.OPTIMAL and objective is not None:
            solved[h] = objective
            programs[h] = (program, status, objective, bound)
        elif status is not Status.INFEASIBLE:
            unproven.add(h)
    keep = set(unproven)
    if solved:
        best = max(solved.values()) if maximize else min(solved.values())
        keep |= {h for h, v in solved.items() if not _worse(v, best, maximize, tolerance)}
    kept = replace(table, candidates=tuple(c for c in table.candidates if c.group in keep),
                   groups={h: g for h, g in table.groups.items() if h in keep})
    return kept, programs[next(iter(keep))] if len(keep) == 1 and not unproven else None


def _worse(value: float, best: float, maximize: bool, tolerance: float) -> bool:
    """``value`` (a group's bound or optimum) is not within ``tolerance`` (relative) of the best."""
    slack = tolerance * max(1.0, abs(best))
    return value < best - slack if maximize else value > best + slack


def _bound(cands: list[Candidate], g: Group, targets: Targets) -> float:
    """What a group can reach at best: the highest throughput (min_time: a plan's rate at its most
    dp, or the most the budget buys), the least TCO (min_cost), or nothing known (min_power: every
    group is solved)."""
    if targets.objective is Objective.MIN_TIME:
        most = _gpu_ceiling(g, targets)
        return max(c.replica_tokens_per_s * _most_dp(c, most)
                   for c in cands)
    if targets.objective is Objective.MIN_COST:
        return min(_cost_floor(c, g, targets) for c in cands)
    return 0.0


def _cost_floor(c: Candidate, g: Group, targets: Targets) -> float:
    """A lower bound on the TCO of any answer running ``c`` on ``g``: the GPUs the deadline needs
    (dp ≥ required rate / the plan's rate, less a relative 1e-6 for the solver's tolerance), each
    bought at the group's GPU price beyond those it owns, or rented (for the offer's hours, or the
    job's GPU-hours on demand, which no dp changes); servers, network, power and upkeep only add
    to it. Infinite when even the plan's most dp misses the deadline."""
    required = targets.required_tokens_per_s
    dp = c.dp_min
    if required:
        dp = max(dp, math.ceil(required / c.replica_tokens_per_s * (1.0 - 1e-6)))
        if dp > c.dp_max:
            return math.inf
    gpus = dp * c.gpus_per_replica
    if g.rented:
        if g.rent_hours > 0:
            return g.rent_usd_per_gpu_h * g.rent_hours * gpus
        return g.rent_usd_per_gpu_h * job_gpu_hours(c, targets.job_tokens(c.workload)) * (1.0 - 1e-9)
    return max(0, gpus - g.owned_gpus) * g.gpu_usd


def _gpu_ceiling(g: Group, targets: Targets) -> float:
    """The most GPUs of ``g`` the budget allows (a sweep point's budget may be below the one the
    table was enumerated at): capex, and rent for an offer's hours, are part of what any budget
    covers, so GPUs beyond those owned cost at least their price each. Unbounded without a budget,
    at no price, or on demand (a job's GPU-hours do not grow with its GPUs)."""
    if targets.budget_usd is None:
        return math.inf
    if g.rented:
        per_gpu = g.rent_usd_per_gpu_h * g.rent_hours
        return targets.budget_usd // per_gpu if per_gpu > 0 else math.inf
    return g.owned_gpus + targets.budget_usd // g.gpu_usd if g.gpu_usd > 0 else math.inf


def _most_dp(c: Candidate, gpus: float) -> float:
    """The plan's most dp within ``gpus`` GPUs."""
    return c.dp_max if math.isinf(gpus) else min(c.dp_max, gpus // c.gpus_per_replica)
