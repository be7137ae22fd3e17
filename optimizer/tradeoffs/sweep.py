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
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from optimizer.catalog import Catalog, priced_item, with_price
from optimizer.errors import GpuoptError, ProblemError
from optimizer.milp import Status, solve
from optimizer.plans import PlanTable, build_groups, enumerate_candidates
from optimizer.problem import Problem
from optimizer.recommend import colocation_per_watt, electricity_per_watt, targets_of, verify
from optimizer.report import bill_of_materials
from optimizer.validation import parse_quantity

# axis name -> (column, unit text, +1 if a larger value relaxes the problem, -1 if it tightens it)
AXES = {
    "budget": ("budget_usd", "USD", +1),
    "deadline": ("deadline_days", "days", +1),
    "tokens": ("tokens", "tokens", -1),
    "power": ("power_kw", "kW", +1),
    "demand": ("demand_tokens_per_s", "output tokens/s", -1),
    "price": ("price", "USD", -1),
}


@dataclass(frozen=True)
class Axis:
    """One swept quantity and its values; ``item`` names the catalog entry of a price axis."""

    name: str
    values: tuple[float, ...]
    item: str | None = None
    relative: bool = False  # price given as a change in percent of the catalog price

    @property
    def column(self) -> str:
        return f"price:{self.item}" if self.name == "price" else AXES[self.name][0]

    def show(self, value: float) -> str:
        if self.name == "price":
            return f"{value:+g}%" if self.relative else f"${value:,.0f}"
        if self.name == "budget":
            return f"${value:,.0f}"
        return f"{value:,.6g}"


def parse_values(option: str, text: str, parse: Callable[[str], float]) -> tuple[float, ...]:
    """'START:STOP:COUNT' (COUNT evenly spaced values, both ends included), 'A,B,C' or 'A'."""
    text = text.strip()
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError("a range has three parts")
            start, stop, count = parse(parts[0]), parse(parts[1]), int(parts[2])
            if count < 1 or count > 10_000:
                raise ValueError("COUNT must be between 1 and 10000")
            if count == 1:
                return (start,)
            return tuple(start + (stop - start) * i / (count - 1) for i in range(count))
        return tuple(parse(p) for p in text.split(","))
    except ValueError as exc:
        raise ProblemError(f"--{option} '{text}': {exc}. Expected START:STOP:COUNT (e.g. 100k:2M:20), "
                           "a comma-separated list (100k,250k,1M) or one value.") from None


def _positive(text: str) -> float:
    value = parse_quantity(text.strip().lstrip("$"))
    if value <= 0:
        raise ValueError(f"{text!r} is not positive")
    return value


def _percent(text: str) -> float:
    match = re.fullmatch(r"\s*([+-]?[0-9]*\.?[0-9]+)\s*%\s*", text)
    if not match:
        raise ValueError(f"{text!r} is not a change in percent such as -30%")
    value = float(match.group(1))
    if value <= -100:
        raise ValueError(f"{text!r} would make the price zero or negative")
    return value


def parse_price(spec: str, catalog: Catalog) -> Axis:
    """'ID=-30%', 'ID=-30%:0%:4', 'ID=25k' or 'ID=20k,25k': a price axis of one catalog entry."""
    item, sep, values = spec.partition("=")
    if not sep or not item.strip() or not values.strip():
        raise ProblemError(f"--price '{spec}': expected ID=CHANGE, e.g. h100-sxm=-30% or h100-sxm=25000 "
                           "(several as -30%,-10%,0% or -30%:0%:4).")
    item = item.strip()
    try:
        priced_item(catalog, item)
    except GpuoptError as exc:
        raise ProblemError(f"--price '{spec}': {exc}") from None
    relative = "%" in values
    return Axis("price", parse_values("price", values, _percent if relative else _positive), item, relative)


def parse_axes(problem: Problem, catalog: Catalog, budget: str | None, deadline: str | None, tokens: str | None,
               power: str | None, demand: str | None, prices: tuple[str, ...]) -> list[Axis]:
    """The sweep's axes from the command-line texts, checked against the problem's kind."""
    axes = []
    for name, text in (("budget", budget), ("deadline", deadline), ("tokens", tokens), ("power", power),
                       ("demand", demand)):
        if text is None:
            continue
        if problem.kind == "serve" and name in ("tokens", "deadline"):
            raise ProblemError(f"--{name}: '{problem.name}' is a serving problem; it has no training "
                               f"{name}. To fix: sweep --demand (output tokens/s), --power or --price.")
        if problem.kind == "train" and name == "demand":
            raise ProblemError(f"--demand: '{problem.name}' is a training problem. To fix: sweep --tokens, "
                               "--deadline, --budget, --power or --price.")
        if name == "deadline" and problem.objective == "min_time":
            raise ProblemError(f"--deadline: '{problem.name}' minimises time under a budget; a deadline would "
                               "not change its answer. To fix: sweep --budget or --power.")
        axes.append(Axis(name, parse_values(name, text, _positive)))
    axes += [parse_price(spec, catalog) for spec in prices]
    if not axes:
        raise ProblemError("nothing to sweep. To fix: give at least one of --budget, --deadline, --tokens, "
                           "--power, --demand or --price, e.g. --budget 100k:2M:20.")
    seen = [a.column for a in axes]
    if len(set(seen)) != len(seen):
        raise ProblemError(f"the same axis is given twice ({', '.join(sorted(seen))}). "
                           "To fix: give each axis once, with all its values.")
    return axes


def price_of(catalog: Catalog, axis: Axis, value: float) -> float:
    _, item = priced_item(catalog, axis.item or "")
    base = item.price.usd
    return base * (1 + value / 100) if axis.relative else value


def apply_point(problem: Problem, catalog: Catalog, axes: list[Axis],
                values: tuple[float, ...]) -> tuple[Problem, Catalog]:
    """The problem and catalog of one sweep point."""
    for axis, v in zip(axes, values, strict=True):
        if axis.name == "budget":
            problem = replace(problem, budget_usd=v)
        elif axis.name == "deadline":
            problem = replace(problem, deadline_s=v * 86400.0)
        elif axis.name == "tokens":
            problem = replace(problem, tokens=v)
        elif axis.name == "power":
            problem = replace(problem, power_cap_w=v * 1e3)
        elif axis.name == "demand":
            total = problem.total_demand
            problem = replace(problem, demands=tuple(replace(d, output_tokens_per_s=d.output_tokens_per_s * v / total)
                                                     for d in problem.demands))
        else:
            note = f"sweep scenario {axis.item}={axis.show(v)}"
            catalog = with_price(catalog, axis.item or "", price_of(catalog, axis, v), note)
    return problem, catalog


def loosest(problem: Problem, catalog: Catalog, axes: list[Axis]) -> tuple[Problem, Catalog]:
    """The point whose plan table contains every other point's: the largest budget and power cap
    and the lowest prices (the budget and power bound each plan's GPU count)."""
    widest = [max(a.values) if AXES[a.name][2] > 0 else min(a.values) for a in axes]
    return apply_point(problem, catalog, axes, tuple(widest))


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
        return "capex" if p.kind == "train" and p.objective == "min_time" and p.budget_covers == "capex" else "tco"

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
    elif workers <= 1 or len(jobs) == 1:
        _init_worker(*args)
        stream: Iterator[SweepRow] = map(_run_point, jobs)
        rows = list(progress(stream, len(jobs)) if progress else stream)
    else:
        with ProcessPoolExecutor(min(workers, len(jobs)), initializer=_init_worker, initargs=args) as pool:
            stream = pool.map(_run_point, jobs)
            rows = list(progress(stream, len(jobs)) if progress else stream)
    result = SweepResult(problem, axes, tuple(rows), len(table.candidates) + len(table.serving), ())
    marked = mark_pareto(result)
    return replace(marked, violations=monotonicity_violations(marked))


def mark_pareto(result: SweepResult) -> SweepResult:
    """Flag the points no other point beats on both cost and speed (training: cost vs days;
    serving: cost vs output tokens/s). Ties keep the first point in grid order."""
    def lag(r: SweepRow) -> float:  # lower is better: days to train, or minus the serving capacity
        return (r.days or math.inf) if result.problem.kind == "train" else -r.tokens_per_s

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
    maximize = result.problem.objective == "min_time"
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


COST_CATEGORIES = ("gpu", "server", "nic", "switch", "electricity")


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
        if result.problem.kind == "serve":
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
    serve = p.kind == "serve"
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



def default_axis(problem: Problem, points: int) -> Axis:
    """The trade-off a report shows: budget (or power cap) for the fastest-within-budget problems,
    the deadline for cheapest-by-a-deadline ones, the demand for serving; a quarter (a half for
    deadlines) to twice the problem's own value."""
    def span(value: float, low: float) -> tuple[float, ...]:
        return parse_values("sweep", f"{value * low}:{value * 2}:{points}", float)

    if problem.kind == "serve":
        return Axis("demand", span(problem.total_demand, 0.25))
    if problem.objective == "min_cost" and problem.deadline_s is not None:
        return Axis("deadline", span(problem.deadline_s / 86400, 0.5))
    if problem.budget_usd is not None:
        return Axis("budget", span(problem.budget_usd, 0.25))
    return Axis("power", span((problem.power_cap_w or 0) / 1e3, 0.25))
