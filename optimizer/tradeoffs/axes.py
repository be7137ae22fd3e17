"""Sweep axes: what a sweep varies (budget, deadline, tokens, power cap, serving demand, a price),
parsed from the command line, and applied to a problem and its catalog point by point.

An axis knows whether a larger value relaxes the problem (budget, deadline, power cap) or
tightens it (tokens, demand, a price): the loosest point, whose plan table holds every other
point's, is taken from that (``loosest``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from optimizer.catalog import Catalog, priced_item, with_price
from optimizer.errors import GpuoptError, ProblemError
from optimizer.problem import Problem, ServeWorkload, TrainWorkload
from optimizer.problem.enums import Objective
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
        if self.name in ("deadline", "power"):  # days and kW to the hundredth, not 15.7143
            return f"{value:,.2f}".rstrip("0").rstrip(".")
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
        low, high, middle = EXAMPLES.get(option, EXAMPLES["budget"])
        raise ProblemError(f"--{option} '{text}': {exc}. Expected START:STOP:COUNT (e.g. {low}:{high}:5), "
                           f"a comma-separated list ({low},{middle},{high}) or one value.") from None


# (start, stop, a middle value) of each axis's examples in messages
EXAMPLES = {"budget": ("100k", "2M", "500k"), "deadline": ("20", "60", "30"), "power": ("20", "60", "30"),
            "price": ("-30%", "0%", "-15%")}


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
    w = problem.workloads[0] if len(problem.workloads) == 1 else None
    for name, text in (("budget", budget), ("deadline", deadline), ("tokens", tokens), ("power", power),
                       ("demand", demand)):
        if text is None:
            continue
        if w is None and name in ("tokens", "deadline", "demand"):
            raise ProblemError(f"--{name}: '{problem.name}' has several workloads, each with its own {name}. "
                               "To fix: sweep --budget, --power or --price.")
        if isinstance(w, ServeWorkload) and name in ("tokens", "deadline"):
            raise ProblemError(f"--{name}: '{problem.name}' is a serving problem; it has no training "
                               f"{name}. To fix: sweep --demand (output tokens/s), --power or --price.")
        if isinstance(w, TrainWorkload) and name == "demand":
            raise ProblemError(f"--demand: '{problem.name}' is a training problem. To fix: sweep --tokens, "
                               "--deadline, --budget, --power or --price.")
        if name == "deadline" and problem.objective.maximize:
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
            problem = problem.with_workload(deadline_s=v * 86400.0)
        elif axis.name == "tokens":
            problem = problem.with_workload(tokens=v)
        elif axis.name == "power":
            problem = replace(problem, power_cap_w=v * 1e3)
        elif axis.name == "demand":
            total = problem.total_demand
            problem = problem.with_workload(demands=tuple(
                replace(d, output_tokens_per_s=d.output_tokens_per_s * v / total) for d in problem.demands))
        else:
            note = f"sweep scenario {axis.item}={axis.show(v)}"
            catalog = with_price(catalog, axis.item or "", price_of(catalog, axis, v), note)
            if not axis.relative:  # a price in USD is a quote: it buys a GPU no longer sold new, as --price does
                problem = problem.with_quotes({axis.item or ""})
    return problem, catalog


def loosest(problem: Problem, catalog: Catalog, axes: list[Axis]) -> tuple[Problem, Catalog]:
    """The point whose plan table contains every other point's: the largest budget and power cap
    and the lowest prices (the budget and power bound each plan's GPU count)."""
    widest = [max(a.values) if AXES[a.name][2] > 0 else min(a.values) for a in axes]
    return apply_point(problem, catalog, axes, tuple(widest))


def default_axis(problem: Problem, points: int) -> Axis:
    """The trade-off a report shows: budget (or power cap) for the fastest-within-budget problems,
    the deadline for cheapest-by-a-deadline ones, the demand for serving; a quarter (a half for
    deadlines) to twice the problem's own value."""
    def span(value: float, low: float) -> tuple[float, ...]:
        return parse_values("sweep", f"{value * low}:{value * 2}:{points}", float)

    w = problem.workloads[0] if len(problem.workloads) == 1 else None
    if isinstance(w, ServeWorkload):
        return Axis("demand", span(w.total_demand, 0.25))
    if problem.objective is Objective.MIN_COST and isinstance(w, TrainWorkload) and w.deadline_s is not None:
        return Axis("deadline", span(w.deadline_s / 86400, 0.5))
    if problem.budget_usd is not None:
        return Axis("budget", span(problem.budget_usd, 0.25))
    return Axis("power", span((problem.power_cap_w or 0) / 1e3, 0.25))
