"""What-if sweeps: the optimum re-solved over a grid of budgets, deadlines, token counts, power
caps, serving demands and price scenarios, with its Pareto frontier and a monotonicity check.

Plan generation is shared: the candidate plans are enumerated once, at the sweep's loosest
point (largest budget and power cap, lowest prices), and every point re-prices the hardware
groups and re-solves the MIP over that one table. The points' feasible sets are then nested
the way their limits are, so the optimum must move one way along every axis (more budget
never gives a slower cluster, a higher price never a cheaper one); a point that does not is
reported as a bug. Each point is re-checked by the performance model like any solve.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from optimizer.catalog import Catalog
from optimizer.milp import Status, solve
from optimizer.parallel import ordered_map
from optimizer.plans import PlanTable, build_groups, enumerate_candidates
from optimizer.problem import Problem
from optimizer.problem.enums import BudgetCovers
from optimizer.recommend import colocation_per_watt, electricity_per_watt, targets_of, verify
from optimizer.report import bill_of_materials
from optimizer.tradeoffs.axes import AXES, Axis, apply_point, loosest


def reprice(table: PlanTable, problem: Problem, catalog: Catalog) -> PlanTable:
    """``table`` with its hardware groups priced from ``catalog`` (the plans do not depend on price)."""
    fresh = {g.key: g for gpu in {g.gpu for g in table.groups.values()}
             for role in {g.role for g in table.groups.values()}
             for g in build_groups(problem, catalog, gpu, role)}
    return replace(table, groups={k: fresh[k] for k in table.groups})


@dataclass(frozen=True)
class SweepRow:
    """One point: its axis values and the re-checked optimum there (None where infeasible)."""

    index: int
    values: tuple[float, ...]
    status: str
    gpu: str = ""
    gpus: int = 0
    servers: int = 0
    network: str = ""
    plan: str = ""
    tokens_per_s: float = 0.0  # training: re-checked rate; serving: capacity
    days: float | None = None
    capex: float = 0.0
    tco: float = 0.0
    power_kw: float = 0.0
    costs: tuple[tuple[str, float], ...] = ()  # capex by BOM category, then electricity
    objective: float | None = None  # the solver's: tokens/s (min_time) or TCO (min_cost)
    gap: float | None = None
    pareto: bool = False

    @property
    def feasible(self) -> bool:
        return self.objective is not None


def solve_point(problem: Problem, catalog: Catalog, table: PlanTable, index: int, values: tuple[float, ...],
                backend: str, time_limit_s: float) -> SweepRow:
    """Solve and re-check one point over the shared table."""
    sol = solve(table, targets_of(problem), backend, time_limit_s, problem.solver.mip_gap)
    if sol.status not in (Status.OPTIMAL, Status.FEASIBLE):
        return SweepRow(index, values, sol.status.value)
    rec = verify(problem, catalog, table, sol)
    costs: dict[str, float] = {}
    for row in bill_of_materials(rec, catalog):
        costs[row.category] = costs.get(row.category, 0.0) + row.extended_price_usd
    costs["electricity"] = electricity_per_watt(problem) * sol.power_w
    costs["colocation"] = colocation_per_watt(problem) * sol.power_w
    costs["maintenance"] = sol.opex - costs["electricity"] - costs["colocation"]
    costs = {k: v for k, v in costs.items() if v or k == "electricity"}
    gpus = sorted({table.groups[p.group].gpu for p in sol.purchases})
    nets = sorted({table.groups[p.group].fabric or "-" for p in sol.purchases})
    if sol.candidate is not None and rec.perf is not None:
        c = sol.candidate.plan
        plan = f"TP{c.tp} PP{c.pp} DP{sol.dp * c.ep}" + (f" CP{c.cp}" if c.cp > 1 else "") \
            + (f" EP{c.ep}" if c.ep > 1 else "")
        rate, days = rec.perf.tokens_per_s, rec.days
    else:
        plan = "; ".join(f"{r.demand}: {n}x{table.groups[r.group].gpu} TP{r.plan.tp}" for r, n in sol.replicas)
        rate, days = sum(sol.serving_capacity().values()), None
    return SweepRow(index, values, sol.status.value, "+".join(gpus), sum(p.gpus for p in sol.purchases),
                    sum(p.servers for p in sol.purchases), "+".join(nets), plan, rate, days, sol.capex, sol.tco,
                    sol.power_w / 1e3, tuple(costs.items()), sol.objective, sol.gap)


_WORKER: dict[str, Any] = {}


def _init_worker(problem: Problem, catalog: Catalog, axes: list[Axis], table: PlanTable, backend: str,
                 time_limit_s: float) -> None:
    _WORKER.update(problem=problem, catalog=catalog, axes=axes, table=table, backend=backend, limit=time_limit_s)


def _run_point(job: tuple[int, tuple[float, ...]]) -> SweepRow:
    index, values = job
    w = _WORKER
    problem, catalog = apply_point(w["problem"], w["catalog"], w["axes"], values)
    table = reprice(w["table"], problem, catalog) if any(a.name == "price" for a in w["axes"]) else w["table"]
    return solve_point(problem, catalog, table, index, values, w["backend"], w["limit"])


@dataclass(frozen=True)
class SweepResult:
    problem: Problem
    axes: list[Axis]
    rows: tuple[SweepRow, ...]
    candidates: int
    violations: tuple[str, ...]

    @property
    def cost_name(self) -> str:
        """The cost the frontier trades: capex when only capex is budgeted, else TCO."""
        p = self.problem
        capex_only = p.training is not None and p.objective.maximize and p.budget_covers is BudgetCovers.CAPEX
        return "capex" if capex_only else "tco"

    def cost(self, row: SweepRow) -> float:
        return row.capex if self.cost_name == "capex" else row.tco


def run_sweep(problem: Problem, catalog: Catalog, axes: list[Axis], backend: str, time_limit_s: float,
              workers: int = 1, progress: Callable[[Iterator[SweepRow], int], Iterator[SweepRow]] | None = None,
              table: PlanTable | None = None) -> SweepResult:
    """Every grid point solved over one shared plan table; rows in grid order whatever the workers."""
    jobs = list(enumerate(itertools.product(*(a.values for a in axes))))
    wide_problem, wide_catalog = loosest(problem, catalog, axes)
    table = table or enumerate_candidates(wide_problem, wide_catalog)
    args = (problem, catalog, axes, table, backend, time_limit_s)
    rows: list[SweepRow] = []
    if not table.candidates and not table.serving:
        rows = [SweepRow(i, v, Status.INFEASIBLE.value) for i, v in jobs]
    else:
        stream = ordered_map(_run_point, jobs, workers, _init_worker, args)
        rows = list(progress(stream, len(jobs)) if progress else stream)
    result = SweepResult(problem, axes, tuple(rows), len(table.candidates) + len(table.serving), ())
    marked = mark_pareto(result)
    return replace(marked, violations=monotonicity_violations(marked))


def mark_pareto(result: SweepResult) -> SweepResult:
    """Flag the points no other point beats on both cost and speed (training: cost vs days;
    serving: cost vs output tokens/s). Ties keep the first point in grid order."""
    def lag(r: SweepRow) -> float:  # lower is better: days to train, or minus the serving capacity
        return (r.days or math.inf) if result.problem.training else -r.tokens_per_s

    on_frontier, best = set(), math.inf
    for r in sorted((r for r in result.rows if r.feasible), key=lambda r: (result.cost(r), lag(r), r.index)):
        if lag(r) < best:
            on_frontier.add(r.index)
            best = lag(r)
    rows = tuple(replace(r, pareto=r.index in on_frontier) for r in result.rows)
    return replace(result, rows=rows)


def monotonicity_violations(result: SweepResult) -> tuple[str, ...]:
    """Points where relaxing one axis (others fixed) made the solver's optimum worse.

    Over one shared table the feasible sets are nested, so this is a bug, never a modelling
    effect; the tolerance is the MIP gap. Only proven-optimal points are compared.
    """
    maximize = result.problem.objective.maximize
    tol = max(result.problem.solver.mip_gap, 1e-9) * 2
    out = []
    for k, axis in enumerate(result.axes):
        sign = AXES[axis.name][2]
        lines: dict[tuple[float, ...], list[SweepRow]] = {}
        for r in result.rows:
            lines.setdefault(r.values[:k] + r.values[k + 1:], []).append(r)
        for line in lines.values():
            line.sort(key=lambda r: sign * r.values[k])  # from tightest to loosest
            for a, b in itertools.pairwise(line):
                if a.status != Status.OPTIMAL.value:
                    continue
                if not b.feasible:
                    worse = b.status == Status.INFEASIBLE.value
                elif maximize:
                    worse = b.objective < a.objective * (1 - tol)  # type: ignore[operator]
                else:
                    worse = b.objective > a.objective * (1 + tol) + 1e-6  # type: ignore[operator]
                if worse:
                    out.append(f"{axis.column} {axis.show(a.values[k])} -> {axis.show(b.values[k])} "
                               f"(point {a.index} -> {b.index}) made the optimum worse: "
                               f"{_objective(a, maximize)} -> {_objective(b, maximize)}")
    return tuple(out)


def _objective(r: SweepRow, maximize: bool) -> str:
    if not r.feasible:
        return r.status
    return f"{r.objective:,.1f} tokens/s" if maximize else f"${r.objective:,.0f}"


# every cost of a point's TCO: the bill of materials by category (rent too), then opex over the horizon
COST_CATEGORIES = ("gpu", "server", "nic", "cable", "switch", "rack", "install", "rent", "electricity", "maintenance",
                   "colocation")


def table_rows(result: SweepResult) -> list[dict[str, str]]:
    """The sweep as rows of formatted strings (the CSV and the text table), byte-deterministic."""
    out = []
    for r in result.rows:
        row = {"point": str(r.index)}
        for axis, v in zip(result.axes, r.values, strict=True):
            row[axis.column] = f"{v:.6g}" if axis.name != "budget" else f"{v:.2f}"
        costs = dict(r.costs)
        row.update({
            "status": r.status, "gpu": r.gpu, "gpus": str(r.gpus), "servers": str(r.servers),
            "network": r.network, "plan": r.plan,
            "tokens_per_s": f"{r.tokens_per_s:.1f}",
            "days": "" if r.days is None else f"{r.days:.3f}",
            "capex_usd": f"{r.capex:.2f}", "tco_usd": f"{r.tco:.2f}", "power_kw": f"{r.power_kw:.3f}",
            **{f"{c}_usd": f"{costs.get(c, 0.0):.2f}" for c in COST_CATEGORIES},
            "gap": "" if r.gap is None else f"{r.gap:.2e}",
            "pareto": "yes" if r.pareto else "",
        })
        if result.problem.serving:
            del row["days"]
        out.append(row)
    return out


def to_csv(result: SweepResult) -> str:
    rows = table_rows(result)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def render_text(result: SweepResult) -> str:
    """A table of every point, then the Pareto frontier and the monotonicity check."""
    p = result.problem
    serve = p.serving is not None
    head = [a.column for a in result.axes] + ["gpu", "gpus", "plan", "output tok/s" if serve else "days",
                                               result.cost_name, "kW", ""]
    body = []
    for r in result.rows:
        cells = [a.show(v) for a, v in zip(result.axes, r.values, strict=True)]
        if r.feasible:
            speed = f"{r.tokens_per_s:,.0f}" if serve else f"{r.days:,.1f}"
            cells += [r.gpu, str(r.gpus), r.plan, speed, f"${result.cost(r):,.0f}", f"{r.power_kw:,.1f}",
                      "*" if r.pareto else ""]
        else:
            cells += [r.status, "", "", "", "", "", ""]
        body.append(cells)
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = [f"gpuopt sweep: {p.name} ({len(result.rows)} points, {result.candidates} shared candidate plans)", ""]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body]]
    frontier = [r for r in result.rows if r.pareto]
    what = "output tokens/s" if serve else "days"
    lines += ["", f"Pareto frontier ({result.cost_name} vs {what}), marked *: {len(frontier)} of "
              f"{sum(r.feasible for r in result.rows)} feasible points."]
    for r in sorted(frontier, key=result.cost):
        speed = f"{r.tokens_per_s:,.0f} output tokens/s" if serve else f"{r.days:,.1f} days"
        lines.append(f"  ${result.cost(r):,.0f}: {speed} with {r.gpus} x {r.gpu} ({r.plan})")
    if result.violations:
        lines.append("MONOTONICITY VIOLATED (a bug; please report it):")
        lines += [f"  {v}" for v in result.violations]
    else:
        lines.append("Monotonicity checked: relaxing any axis never made the optimum worse.")
    return "\n".join(lines) + "\n"
