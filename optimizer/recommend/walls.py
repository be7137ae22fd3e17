"""Why a training job misses its deadline even at the fastest cluster the problem allows: every
limit that stands in the way, in the order they bind, each with how far lifting it moves the answer.

The budget and the power cap bind first (the fastest cluster within them against the fastest
without them, both solved). Past them the job is as fast as its data-parallel degree allows: the
global batch cap stops data parallelism at ``max_global_batch / (micro-batch x micro-batches)``
replicas and ``hardware.max_gpus`` caps the GPUs, or else the site's racks and unit caps do; the
GPUs and batch the deadline needs are a linear estimate from the fastest cluster's throughput per
GPU (a lower bound: data-parallel communication only grows with the degree), priced in whole
servers. A budget those GPUs outgrow and export rules that keep faster GPUs out are named too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from optimizer.catalog import Catalog
from optimizer.milp import GroupCount, MilpSolution, Status, Targets, capex_parts, purchase, solve
from optimizer.plans import Group, PlanTable
from optimizer.problem import Problem
from optimizer.problem.enums import Objective
from optimizer.problem.schema import DEFAULT_BATCH_TOKENS, HardwareChoice
from optimizer.recommend.targets import plan_table, targets_of

# the problem schema's defaults (optimizer.problem.schema), named as such where a wall cites them
DEFAULT_MAX_GPUS = HardwareChoice.model_fields["max_gpus"].default
BINDS = 0.99  # a limit binds where lifting it makes the job at least 1 % faster


@dataclass(frozen=True, kw_only=True)
class Wall:
    """One limit between a training job and its deadline.

    ``days_before``: the fastest the job runs while this limit stands (the walls before it lifted);
    ``days_after``: once it is lifted too (solved for the budget and power cap, a linear estimate
    past them). ``field`` is where the problem file sets the limit."""

    limit: str  # budget | power | global_batch | max_gpus | deadline
    field: str
    days_before: float
    days_after: float
    text: str


def deadline_walls(problem: Problem, catalog: Catalog, backend: str, limit: float,
                   fastest_days: float | None) -> list[Wall]:
    """The walls of a training problem whose deadline no cluster within its limits meets;
    ``fastest_days``: the fastest it runs within every limit (None: nothing runs within them)."""
    job = problem.training
    if job is None or job.deadline_s is None:
        return []
    deadline = job.deadline_s / 86400
    free = problem.with_limits(budget_usd=None, power_cap_w=None)
    table = plan_table(free, catalog)
    s = fastest(free, table, backend, limit)
    if s is None or s.candidate is None:
        return []
    days = job.tokens / s.tokens_per_s / 86400
    g = table.groups[s.candidate.group]
    gpus = s.dp * s.candidate.gpus_per_replica  # the plan's GPUs (without a budget, unused groups are noise)
    at = f"{days:,.1f} days on {gpus:,} x {g.gpu} ({hardware_cost(g, gpus)})"
    out = _spending_walls(problem, catalog, backend, limit, fastest_days, days, at, deadline)
    if days > deadline:
        used = catalog.gpus[g.gpu].used_price
        if g.gpu in problem.end_of_life and used is not None:  # more of them come only used
            g = replace(g, gpu_usd=used.usd)
        out += _scale_walls(problem, s, days, deadline, gpus, g)
        again = _budget_after(problem, g, gpus * days / deadline, deadline)
        if again is not None and not any(w.limit == "budget" for w in out):
            out.append(again)
        region = _region_wall(free, catalog, backend, limit, days)
        if region is not None:
            out.append(region)
    before = fastest_days if fastest_days is not None else math.inf
    out.append(Wall(limit="deadline", field="deadline_days", days_before=before, days_after=before,
                    text=f"deadline {deadline:,.1f} days (deadline_days): the fastest cluster within every limit "
                         + (f"takes {before:,.1f} days" if math.isfinite(before) else "runs nowhere")
                         + (f"; lifting the limits above, in order, brings it to {deadline:,.1f} days"
                            if len(out) else "")))
    return out


def _spending_walls(problem: Problem, catalog: Catalog, backend: str, limit: float, fastest_days: float | None,
                    free_days: float, at: str, deadline: float) -> list[Wall]:
    """The budget and the power cap, where lifting them speeds the job up (both solved; with both
    set, the budget is lifted first and the power cap after it, and only if the deadline is still
    missed once the budget is lifted)."""
    job = problem.training
    assert job is not None
    before = fastest_days if fastest_days is not None else math.inf
    out = []
    if problem.budget_usd is not None:
        after = free_days
        if problem.power_cap_w is not None:  # the budget alone lifted: the power cap may still bind
            capped = problem.with_limits(budget_usd=None)
            s = fastest(capped, plan_table(capped, catalog), backend, limit)
            after = job.tokens / s.tokens_per_s / 86400 if s is not None else math.inf
        if after < before * BINDS:
            within = f"within it the fastest cluster takes {before:,.1f} days" if math.isfinite(before) \
                else "nothing it buys can train the model"
            out.append(Wall(limit="budget", field="budget.usd", days_before=before, days_after=after,
                            text=f"budget ${problem.budget_usd:,.0f} (budget.usd): {within}; without it "
                                 + (at if problem.power_cap_w is None else f"{after:,.1f} days")
                                 + _faster(before, after)))
            before = after
    cap = problem.power_cap_w
    if cap is not None and free_days < before * BINDS and before > deadline:
        out.append(Wall(limit="power", field=problem.power_field, days_before=before, days_after=free_days,
                        text=f"power cap {problem.power_text(cap)} ({problem.power_field}): within it the fastest "
                             f"cluster takes {before:,.1f} days; without it {at}{_faster(before, free_days)}"))
    return out


def _faster(before: float, after: float) -> str:
    return f", {before / after:,.0f}x faster" if math.isfinite(before) and before / after >= 1.5 else ""


def whole_servers(g: Group, gpus: float) -> tuple[GroupCount, float]:
    """The least hardware that runs ``gpus`` GPUs of group ``g`` (``milp.purchase``: whole servers,
    a rack-scale unit such as an NVL72 with every slot filled, owned ones first) and what its GPUs
    and servers cost to buy before the network (``milp.capex_parts``: owned ones cost nothing)."""
    count = purchase(g, math.ceil(gpus))
    parts = capex_parts(g, count)
    return count, parts.get("gpus", 0.0) + parts.get("servers", 0.0)


def hardware_cost(g: Group, gpus: float) -> str:
    """``whole_servers`` in words: '$X of GPUs and servers: N GPUs in S x server' (rented: the
    offer and its rate)."""
    if g.rented:
        return f"rented from {g.offer} at ${g.rent_usd_per_gpu_h:g}/GPU-hour"
    count, usd = whole_servers(g, gpus)
    return f"${usd:,.0f} of GPUs and servers: {count.gpus:,} GPUs in {count.servers:,} x {g.server}"


def _estimated_cost(g: Group, gpus: float) -> str:
    """``hardware_cost`` of a cluster the deadline would need, an estimate: 'some $X of GPUs and
    servers: ...', or the offer it would be rented from."""
    return hardware_cost(g, gpus) if g.rented else f"some {hardware_cost(g, gpus)}"


def _scale_walls(problem: Problem, s: MilpSolution, days: float, deadline: float, gpus: int,
                 g: Group) -> list[Wall]:
    """Past the budget and power cap: the global batch cap where the fastest cluster has no room
    for another replica under it, and ``hardware.max_gpus`` where the deadline needs more GPUs than
    it allows, with the batch and GPUs the deadline needs; where neither binds, the site's own
    limits (racks, unit caps) that stopped the cluster."""
    job = problem.training
    assert job is not None and s.candidate is not None
    need = days / deadline  # times the fastest cluster's speed
    c = s.candidate.plan
    per_replica = c.micro_batch * c.num_micro_batches
    seqs = s.dp * per_replica
    # the batch cap binds where one more replica would not fit under it; the GPU count where the
    # deadline needs more GPUs than it allows
    batch_binds = seqs + per_replica > job.max_global_batch
    gpus_bind = gpus * need > problem.max_gpus
    out = []
    if batch_binds:
        tokens = job.max_global_batch * job.seq_len
        room = problem.max_gpus / gpus if gpus_bind else need  # how far more replicas go before max_gpus binds
        after = days / min(need, max(room, 1.0))
        default = ", the default" if 0 <= DEFAULT_BATCH_TOKENS - tokens < job.seq_len else ""  # whole sequences
        out.append(Wall(limit="global_batch", field="workload.global_batch.max_tokens", days_before=days,
                        days_after=after,
                        text=f"global batch cap {tokens / 1e6:,.1f}M tokens ({job.max_global_batch:,} sequences, "
                             f"workload.global_batch.max_tokens{default}): stops data parallelism at {s.dp:,} replicas "
                             f"({gpus:,} GPUs); {deadline:,.1f} days needs about {tokens * need / 1e6:,.1f}M tokens "
                             "per step, at some cost in convergence"))
        days = after
    if gpus_bind:
        out.append(Wall(limit="max_gpus", field="hardware.max_gpus", days_before=days, days_after=deadline,
                        text=f"GPU count {problem.max_gpus:,} (hardware.max_gpus"
                             f"{', the default' if problem.max_gpus == DEFAULT_MAX_GPUS else ''}): "
                             f"{deadline:,.1f} days needs about "
                             f"{math.ceil(gpus * need):,} GPUs at the same speed each, "
                             f"{_estimated_cost(g, gpus * need)}"))
    if not out:  # neither cap binds: the site's own limits stop the cluster, or nothing does
        site = _site_limits(problem, g.gpu)
        stops = (f"the site's limits ({', '.join(f'{text} ({key})' for text, key in site)}) stop the fastest "
                 f"cluster at {gpus:,} GPUs; " if site else "")
        out.append(Wall(limit="site" if site else "scale", field=", ".join(key for _, key in site),
                        days_before=days, days_after=deadline,
                        text=f"{stops}{deadline:,.1f} days needs {need:,.1f}x the fastest cluster's speed: about "
                             f"{math.ceil(gpus * need):,} x {g.gpu}, {_estimated_cost(g, gpus * need)}"))
    return out


def _site_limits(problem: Problem, gpu: str) -> list[tuple[str, str]]:
    """(limit, field) of a problem, past its budget, power cap, batch cap and GPU count, that can
    stop a cluster of ``gpu`` from growing: a fixed number of racks, unit caps, a GPU no longer
    sold new (export rules limit which GPUs, not how many: ``_region_wall``)."""
    out = []
    if gpu in problem.end_of_life:
        out.append((f"{gpu} is no longer sold new: more come only used, priced so here", "hardware.allow_used"))
    if problem.racks is not None and problem.racks.count is not None:
        out.append((f"{problem.racks.count} racks of {problem.racks.kw / 1e3:g} kW", "site.racks"))  # kw holds W
    if problem.max_units:
        out.append((", ".join(f"at most {n:,} {unit}" for unit, n in problem.max_units), "hardware.max_units"))
    return out


def _region_wall(free: Problem, catalog: Catalog, backend: str, limit: float, days: float) -> Wall | None:
    """Export rules, where lifting them (buying any GPU the problem allows) makes the fastest
    cluster within the other limits faster: a rule the buyer may not be free to lift, named with
    what it costs in days (``free``: the problem without its budget and power cap)."""
    if free.region is None or not free.buy_gpus:
        return None
    job = free.training
    assert job is not None
    # any GPU the problem allows may be bought, except those no longer sold new (unless used or quoted)
    buy = tuple(g for g in free.gpus if g in (free.buy_gpus or ()) or (g not in free.end_of_life and (
        catalog.gpus[g].sold_new or (free.allow_used and catalog.gpus[g].used_price is not None))))
    open_ = replace(free, region=None, buy_gpus=buy, offers=free.offers_anywhere or free.offers)
    table = plan_table(open_, catalog)
    s = fastest(open_, table, backend, limit)
    if s is None or s.candidate is None or job.tokens / s.tokens_per_s / 86400 >= days * BINDS:
        return None
    after = job.tokens / s.tokens_per_s / 86400
    g, gpus = table.groups[s.candidate.group], s.dp * s.candidate.gpus_per_replica
    allowed = ", ".join(catalog.regions[free.region].allowed_gpus)
    return Wall(limit="region", field="site.region", days_before=days, days_after=after,
                text=f"export rules of region {free.region} (site.region): only {allowed} may be bought; without "
                     f"them the fastest cluster (no budget or power cap) takes {after:,.1f} days instead of "
                     f"{days:,.1f}, on {gpus:,} x {g.gpu} ({hardware_cost(g, gpus)})")


def _budget_after(problem: Problem, g: Group, gpus: float, deadline: float) -> Wall | None:
    """The budget again, past the other walls: the GPUs the deadline needs cost more than it, which
    the budget's own wall (lifting it alone, the power cap or GPU count still binding) cannot show."""
    if problem.budget_usd is None:
        return None
    if g.rented:  # rented for the whole deadline at the offer's rate
        bought, usd, what = math.ceil(gpus), math.ceil(gpus) * g.rent_usd_per_gpu_h * deadline * 24, "in rent"
    else:
        count, usd = whole_servers(g, gpus)
        bought, what = count.gpus, "in GPUs and servers alone"
    if usd <= problem.budget_usd:
        return None
    return Wall(limit="budget", field="budget.usd", days_before=deadline, days_after=deadline,
                text=f"budget ${problem.budget_usd:,.0f} (budget.usd): the {bought:,} x {g.gpu} that "
                     f"{deadline:,.1f} days needs cost some ${usd:,.0f} {what}, "
                     f"{usd / problem.budget_usd:,.0f}x the budget")


def fastest(problem: Problem, table: PlanTable, backend: str, limit: float) -> MilpSolution | None:
    """The fastest cluster over ``table`` within the problem's limits, without its deadline.

    A committed term (a month, a year) is billed for the terms the deadline spans; without the
    deadline a slower job rents it for longer. Where the fastest cluster rents on a term its job
    outlasts, that group is re-billed for the terms the job spans and the solve repeats (billing
    only grows, so this ends)."""
    targets = replace(targets_of(problem), deadline_s=None, objective=Objective.MIN_TIME)
    job = problem.training
    for _ in range(8):
        s = solve_if_any(table, targets, backend, limit, problem)
        if s is None or s.tokens_per_s <= 0 or s.candidate is None or job is None:
            break
        g = table.groups[s.candidate.group]
        hours = job.tokens / s.tokens_per_s / 3600
        if not (g.rented and g.rent_term_h > 0 and g.rent_hours < hours * (1 - 1e-9)):
            return s
        billed = g.rent_term_h * math.ceil(hours / g.rent_term_h - 1e-9)  # the whole terms the job spans
        table = replace(table, groups={**table.groups, g.key: replace(g, rent_hours=billed)})
    else:  # still renting a term its job outlasts: leave that rental out rather than under-bill it
        table = replace(table, candidates=tuple(c for c in table.candidates if c.group != g.key))
        s = solve_if_any(table, targets, backend, limit, problem)
    return s if s is not None and s.tokens_per_s > 0 else None


def solve_if_any(table: PlanTable, targets: Targets, backend: str, limit: float,
                 problem: Problem) -> MilpSolution | None:
    """A relaxed problem's solution, or None if it has no plan or is infeasible too."""
    if not table.candidates and not table.serving:
        return None
    s = solve(table, targets, backend, limit, problem.solver.mip_gap, tie_break=False)
    return s if s.status in (Status.OPTIMAL, Status.FEASIBLE) else None
