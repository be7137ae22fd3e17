"""Why the optimum is what it is: the best plan on every GPU type alone (or the reason, in
numbers, that the type is out), which limits bind at the optimum and what relaxing each is
worth, and for an infeasible problem the smallest change of one limit that makes it feasible.

Every figure comes from a MIP solve re-checked by the performance model, as in ``solve``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from optimizer.catalog import Catalog
from optimizer.plans import PlanTable, enumerate_candidates, restrict
from optimizer.problem import Problem
from optimizer.problem.enums import BudgetCovers
from optimizer.recommend import Repair, feasibility_hints, repairs
from optimizer.tradeoffs.sweep import SweepRow, solve_point

STEP = 0.10  # each limit is relaxed by 10 % to price it

@dataclass(frozen=True)
class GpuOption:
    """One catalog GPU: its best cluster alone, or why it is out."""

    gpu: str
    outcome: str  # optimum | feasible | out
    reason: str = ""
    row: SweepRow | None = None


@dataclass(frozen=True)
class Relaxation:
    """One limit at the optimum: its slack, and the optimum with the limit relaxed by STEP."""

    limit: str  # budget | power | deadline
    current: float  # USD, W or seconds
    slack: float  # in the same unit
    relaxed_to: float
    binding: bool
    row: SweepRow | None  # the optimum with the limit relaxed


@dataclass(frozen=True)
class Explanation:
    problem: Problem
    options: tuple[GpuOption, ...]
    best: SweepRow | None
    relaxations: tuple[Relaxation, ...]
    repairs: tuple[Repair, ...]  # only for an infeasible problem
    infeasible_reason: str = ""
    hints: tuple[str, ...] = ()  # only for an infeasible problem: what solve says would make it feasible


def _row(problem: Problem, catalog: Catalog, table: PlanTable, backend: str, limit: float) -> SweepRow:
    return solve_point(problem, catalog, table, 0, (), backend, limit)


def _better(problem: Problem, a: SweepRow, b: SweepRow) -> bool:
    """a's solver objective beats b's by more than the MIP gap."""
    if not a.feasible or not b.feasible:
        return a.feasible and not b.feasible
    tol = max(problem.solver.mip_gap, 1e-9) * 2
    if problem.objective.maximize:
        return a.objective > b.objective * (1 + tol)  # type: ignore[operator]
    return a.objective < b.objective * (1 - tol) - 1e-6  # type: ignore[operator]


def _not_offered(catalog: Catalog, gpu: str) -> str:
    """Why a catalog GPU is not among the problem's: kept in the catalog for calibration only
    (purchasable: false, offered only when a problem lists it), or the problem's lists."""
    if not catalog.gpus[gpu].purchasable:
        return ("kept in the catalog for calibration only (purchasable: false in catalogs/gpus.yaml); "
                "list it in hardware.allow_gpus to consider it")
    return "not among the problem's GPUs (hardware.allow_gpus, exclude_gpus, allow_vendors, exclude_vendors)"


def gpu_options(problem: Problem, catalog: Catalog, table: PlanTable, backend: str, limit: float,
                best_gpu: str) -> list[GpuOption]:
    """Every catalog GPU: the optimum over its candidates alone (equal to a solve with only that
    GPU allowed), or the reason it is out: the problem's hardware list, licence, precision,
    memory, power or budget at the smallest purchase, or what a cluster of it alone would need."""
    options = []
    for gpu in sorted(catalog.gpus):
        if gpu not in problem.gpus:
            options.append(GpuOption(gpu, "out", _not_offered(catalog, gpu)))
            continue
        if gpu in table.gpu_reasons:
            options.append(GpuOption(gpu, "out", table.gpu_reasons[gpu]))
            continue
        only = restrict(table, gpu)
        if not only.candidates and not only.serving:
            options.append(GpuOption(gpu, "out", "no candidate plan"))
            continue
        alone = replace(problem, gpus=(gpu,))
        row = _row(alone, catalog, only, backend, limit)
        if row.feasible:
            options.append(GpuOption(gpu, "optimum" if gpu == best_gpu else "feasible", row=row))
        else:
            fixes = repairs(alone, catalog, only, backend, limit)
            why = "; ".join(r.describe(alone) for r in fixes) or "no single relaxation makes it feasible"
            options.append(GpuOption(gpu, "out", f"no cluster of it alone meets the targets. {why}"))
    speed = (lambda o: -o.row.tokens_per_s) if problem.objective.maximize else (lambda o: o.row.tco)
    rank = {"optimum": 0, "feasible": 1, "out": 2}
    return sorted(options, key=lambda o: (rank[o.outcome], speed(o) if o.row else 0.0, o.gpu))


def relaxed(problem: Problem) -> Problem:
    """The problem with its budget and power cap relaxed by STEP: its plan table holds every plan
    the relaxations compare (the budget and power bound each plan's GPU count)."""
    return replace(problem, budget_usd=problem.budget_usd and problem.budget_usd * (1 + STEP),
                   power_cap_w=problem.power_cap_w and problem.power_cap_w * (1 + STEP))


def loosened(problem: Problem, other: Problem) -> Problem:
    """``problem`` with a budget and a power cap no tighter than ``other``'s (None: no limit)."""
    def looser(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else max(a, b)

    return replace(problem, budget_usd=looser(problem.budget_usd, other.budget_usd),
                   power_cap_w=looser(problem.power_cap_w, other.power_cap_w))


def relaxations(problem: Problem, catalog: Catalog, best: SweepRow, backend: str,
                limit: float, wide: PlanTable | None = None) -> list[Relaxation]:
    """Budget, power cap and deadline, each relaxed by STEP over one table enumerated at the
    relaxed limits (so every comparison is between solves over the same plans). ``wide``: a table
    the caller enumerated at limits at least as loose (``relaxed``), used instead."""
    table = wide if wide is not None else enumerate_candidates(relaxed(problem), catalog)
    base = _row(problem, catalog, table, backend, limit)
    out = []
    spend = best.tco if problem.budget_covers is BudgetCovers.TCO else best.capex
    deadline = problem.training.deadline_s if problem.training else None
    limits: tuple[tuple[str, float | None, float], ...] = (
        ("budget", problem.budget_usd, (problem.budget_usd or 0) - spend),
        ("power", problem.power_cap_w, (problem.power_cap_w or 0) - best.power_kw * 1e3),
        ("deadline", deadline, (deadline or 0) - (best.days or 0) * 86400))
    for name, current, slack in limits:
        if current is None:
            continue
        looser = Repair(name, current, current * (1 + STEP)).apply(problem)
        row = _row(looser, catalog, table, backend, limit)
        out.append(Relaxation(name, current, slack, current * (1 + STEP), _better(problem, row, base), row))
    return out


def explain(problem: Problem, catalog: Catalog, backend: str | None = None,
            time_limit_s: float | None = None, table: PlanTable | None = None,
            wide: PlanTable | None = None) -> Explanation:
    """``table``: the problem's plans if the caller has them already (they are enumerated otherwise);
    ``wide``: plans at limits at least as loose as ``relaxed(problem)``, for the relaxations."""
    backend = backend or problem.solver.backend
    problem = problem.with_time_limit(time_limit_s)
    limit = problem.solver.time_limit_s
    table = table or enumerate_candidates(problem, catalog)
    best = _row(problem, catalog, table, backend, limit) if table.candidates or table.serving else None
    if best is None or not best.feasible:
        options = gpu_options(problem, catalog, table, backend, limit, "")
        fixes = repairs(problem, catalog, table, backend, limit)  # re-enumerates: works with no plan too
        why = (f"no cluster meets every target of '{problem.name}'" if best is not None
               else f"no GPU in the catalog can run {problem.workload.model_id} under this problem's limits")
        hints = feasibility_hints(problem, catalog, table, backend, limit, found=fixes)
        return Explanation(problem, tuple(options), None, (), tuple(fixes), why, tuple(hints))
    options = gpu_options(problem, catalog, table, backend, limit, best.gpu)  # a serving mix names no one GPU
    relax = relaxations(problem, catalog, best, backend, limit, wide)
    return Explanation(problem, tuple(options), best, tuple(relax), ())


def _limit_text(limit: str, value: float) -> str:
    return {"budget": f"${value:,.0f}", "power": f"{value / 1e3:,.1f} kW",
            "deadline": f"{value / 86400:,.1f} days"}[limit]


def _outcome_text(problem: Problem, row: SweepRow) -> str:
    if problem.serving:
        return f"TCO ${row.tco:,.0f}, capex ${row.capex:,.0f}, {row.power_kw:,.1f} kW"
    return f"{row.days:,.1f} days, capex ${row.capex:,.0f}, TCO ${row.tco:,.0f}, {row.power_kw:,.1f} kW"


def _effect(problem: Problem, best: SweepRow, r: Relaxation) -> str:
    if r.row is None or not r.row.feasible or not r.binding:
        return "no gain: not binding"
    if problem.objective.maximize:
        saved = (best.days or 0) - (r.row.days or 0)
        return f"{r.row.days:,.1f} days (saves {saved:,.1f} days) with {r.row.gpus} x {r.row.gpu}"
    return f"TCO ${r.row.tco:,.0f} (saves ${best.tco - r.row.tco:,.0f}) with {r.row.gpus} x {r.row.gpu}"


NEAR = 0.05  # an alternative within 5 % of the optimum's objective is a near-tie worth naming
WIDE = 0.10  # or within 10 %, where it saves at least 10 % on the other axis (money or days)


def near_ties(e: Explanation, within: float = NEAR) -> list[str]:
    """The best plans on other GPU types within ``within`` of the optimum's objective (TCO, or
    tokens/s for the fastest-within-a-budget problems), or within ``WIDE`` where they save ``WIDE``
    on the other axis (capex, or days), each with what it trades. A plan worse on both axes
    trades nothing and is not named."""
    best, out = e.best, list[str]()
    if best is None:
        return out
    fastest = e.problem.objective.maximize
    for o in e.options:
        r = o.row
        if o.outcome != "feasible" or r is None or not r.feasible:
            continue
        gap = (best.tokens_per_s - r.tokens_per_s) / best.tokens_per_s if fastest else (r.tco - best.tco) / best.tco
        money = r.capex - best.capex if fastest else r.tco - best.tco
        late = r.days - best.days if r.days is not None and best.days is not None else None
        if late is not None and money >= 0 and late >= 0:
            continue  # slower and dearer: no trade to offer
        if fastest:
            saving = -money / best.capex if best.capex else 0.0
        else:
            saving = -late / best.days if late and best.days else 0.0
        if gap > within and not (gap <= WIDE and saving >= WIDE):
            continue
        what = "capex" if fastest else "TCO"
        trade = [f"${abs(money):,.0f} {'more' if money > 0 else 'less'} {what}"]
        if late is not None:
            trade.insert(0, f"{abs(late):,.1f} days {'slower' if late > 0 else 'faster'}")
        elif not fastest:
            trade.insert(0, f"{r.tokens_per_s:,.0f} output tokens/s of capacity")
        behind = f"{gap:.1%} {'slower' if fastest else 'dearer'} than the optimum"
        out.append(f"{r.gpus} x {r.gpu} ({r.plan}): {', '.join(trade)} ({behind})")
    return out


def relaxation_lines(e: Explanation) -> list[str]:
    """One line per limit: its slack at the optimum and what relaxing it by STEP is worth."""
    lines: list[str] = []
    best = e.best
    if best is None:
        return lines
    for r in e.relaxations:
        unit_slack = _limit_text(r.limit, abs(r.slack))
        slack = f"{unit_slack} {'unused' if r.limit != 'deadline' else 'to spare'}" if r.slack > 0 else "none left"
        lines.append(f"{r.limit} {_limit_text(r.limit, r.current)} (slack: {slack}): "
                     f"+{_limit_text(r.limit, r.relaxed_to - r.current)} -> {_effect(e.problem, best, r)}")
    return lines


def render_text(e: Explanation) -> str:
    p = e.problem
    lines = [f"gpuopt explain: {p.name}"]
    if e.best is not None:
        lines.append(f"Optimum: {e.best.gpus} x {e.best.gpu} ({e.best.plan}): {_outcome_text(p, e.best)}.")
    else:
        lines.append(f"Infeasible: {e.infeasible_reason}")
    lines += ["", "Best plan on each GPU type alone (the optimum first):"]
    width = max(len(o.gpu) for o in e.options)
    for o in e.options:
        if o.row is not None:
            mark = "  <- optimum" if o.outcome == "optimum" else ""
            servers = f"{o.row.servers} server{'s' if o.row.servers != 1 else ''}"
            lines.append(f"  {o.gpu:<{width}}  {o.row.gpus} GPUs in {servers} ({o.row.plan}): "
                         f"{_outcome_text(p, o.row)}{mark}")
        else:
            lines.append(f"  {o.gpu:<{width}}  out: {o.reason}")
    ties = near_ties(e)
    if ties:
        lines += ["", f"Near-ties (within {NEAR:.0%} of the optimum, or {WIDE:.0%} for a {WIDE:.0%} saving):"] \
            + [f"  {t}" for t in ties]
    if e.relaxations and e.best is not None:
        lines += ["", f"Limits at the optimum, each relaxed by {STEP:.0%}:"]
        lines += [f"  {line}" for line in relaxation_lines(e)]
    if e.hints:
        lines += ["", "What stands in the way (as gpuopt solve reports it, in the order the limits bind):"]
        lines += [f"  - {h}" for h in e.hints]
    if e.repairs:
        lines += ["", "Smallest single change that makes it feasible:"]
        lines += [f"  {r.describe(p)}" for r in e.repairs]
    elif e.best is None:
        lines += ["", "No single change of budget, power or deadline makes it feasible: allow more GPU types, "
                  "more GPUs (hardware.max_gpus) or a larger global batch."]
    return "\n".join(lines) + "\n"


def to_json(e: Explanation) -> dict[str, Any]:
    def row(r: SweepRow | None) -> dict[str, Any] | None:
        if r is None or not r.feasible:
            return None
        return {"gpu": r.gpu, "gpus": r.gpus, "servers": r.servers, "network": r.network, "plan": r.plan,
                "days": r.days, "tokens_per_s": r.tokens_per_s, "capex_usd": r.capex, "tco_usd": r.tco,
                "power_kw": r.power_kw, "status": r.status, "gap": r.gap}

    return {
        "problem": e.problem.name,
        "feasible": e.best is not None,
        "optimum": row(e.best),
        "infeasible_reason": e.infeasible_reason or None,
        "gpus": [{"gpu": o.gpu, "outcome": o.outcome, "reason": o.reason or None, "best": row(o.row)}
                 for o in e.options],
        "relaxations": [{"limit": r.limit, "current": r.current, "slack": r.slack, "relaxed_to": r.relaxed_to,
                         "binding": r.binding, "optimum_relaxed": row(r.row)} for r in e.relaxations],
        "hints": list(e.hints),
        "near_ties": near_ties(e),
        "repairs": [{"limit": r.limit, "current": r.current, "needed": r.needed, "text": r.describe(e.problem)}
                    for r in e.repairs],
        "units": {"budget": "USD", "power": "W", "deadline": "s"},
    }

