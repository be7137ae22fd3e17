"""Problem → plans → MIP → a checked recommendation, or an explanation of infeasibility.

After every solve the chosen plan is re-checked by the performance model at the dp the
solver chose, and its hardware is re-priced from the catalog, independently of the solver.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from optimizer.catalog import HOURS_PER_YEAR, Catalog
from optimizer.errors import InfeasibleError, SolverError
from optimizer.milp import MilpSolution, Status, Targets, least_purchases, solution_costs, solve
from optimizer.perf.serve import ServeResult, serve
from optimizer.perf.train import TrainResult, train_step
from optimizer.plans import Candidate, PlanTable, ServeCandidate, enumerate_candidates
from optimizer.plans.portfolio import enumerate_portfolio, gpus_needed, overlaps
from optimizer.problem import Problem, confidence_factor


@dataclass(frozen=True)
class Recommendation:
    problem: Problem
    table: PlanTable
    solution: MilpSolution
    perf: TrainResult | None  # the training re-check at the chosen dp
    checks: tuple[str, ...]
    replica_perf: tuple[ServeResult, ...] = ()  # the serving re-check, one per replica type used
    phase_perf: tuple[tuple[str, TrainResult], ...] = ()  # several workloads: each training one's re-check

    @property
    def days(self) -> float:
        return self.problem.tokens / self.perf.tokens_per_s / 86400.0 if self.perf else 0.0


def electricity_per_watt(problem: Problem) -> float:
    """USD of electricity over the horizon per watt of IT load (load factor × PUE × hours × price)."""
    return (problem.load_factor * problem.pue * problem.horizon_years * HOURS_PER_YEAR
            * problem.electricity_usd_per_kwh / 1000.0)


def colocation_per_watt(problem: Problem) -> float:
    """USD of colocation rent over the horizon per watt of IT capacity ($/kW-month × months / 1000)."""
    return problem.colocation_usd_per_kw_month * 12 * problem.horizon_years / 1000.0


def opex_per_watt(problem: Problem) -> float:
    """USD over the horizon per watt of on-site IT load: electricity and colocation."""
    return electricity_per_watt(problem) + colocation_per_watt(problem)


def targets_of(problem: Problem) -> Targets:
    servers = tuple((k, v) for k, v in problem.max_units if k not in problem.gpus)
    targets = Targets(problem.objective, problem.tokens, problem.deadline_s, problem.budget_usd,
                      problem.budget_covers, problem.power_cap_w, opex_per_watt(problem),
                      tuple((d.name, d.output_tokens_per_s) for d in problem.demands),
                      problem.maintenance_per_year * problem.horizon_years, problem.installation_usd_per_server,
                      problem.racks, servers)
    if not problem.phases:
        return targets
    return replace(targets, demands=tuple((f"{ph.name}/{d.name}", d.output_tokens_per_s) for ph in problem.phases
                                          for d in ph.problem.demands),
                   jobs=tuple((ph.name, ph.problem.tokens, ph.problem.deadline_s) for ph in problem.phases
                              if ph.kind == "train"),
                   overlaps=overlaps(problem.phases))


def plan_table(problem: Problem, catalog: Catalog) -> PlanTable:
    """The candidates of ``problem``: its workload's, or every workload's on shared hardware."""
    return enumerate_portfolio(problem, catalog) if problem.phases else enumerate_candidates(problem, catalog)


def spend(problem: Problem, sol: MilpSolution) -> float:
    """What the budget bounds: capex and rent, or the whole TCO."""
    return sol.tco if problem.budget_covers == "tco" else sol.capex + sol.rent


def verify(problem: Problem, catalog: Catalog, table: PlanTable,
           sol: MilpSolution) -> tuple[TrainResult | None, tuple[str, ...], tuple[ServeResult, ...]]:
    """Re-check the solver's answer without the solver; raise SolverError if it does not hold."""
    if problem.phases:
        _, several_checks, several_results = verify_several(problem, catalog, table, sol)
        return None, several_checks, several_results
    if problem.kind == "serve":
        serve_checks, serve_results = verify_serving(problem, catalog, table, sol)
        return None, serve_checks, serve_results
    if sol.candidate is None or sol.counts is None:
        raise SolverError("verify() needs a solution with a chosen plan")
    checks: list[str] = []
    problems: list[str] = []
    c = sol.candidate
    result = _train_checks(problem, catalog, table, c, sol.dp, sol.counts.servers, checks, problems)
    _repriced(problem, table, sol, {c.group: c.gpus_per_replica * sol.dp}, checks, problems)
    _limits(problem, sol, checks, problems)
    if problems:
        raise SolverError("the solver's answer failed the independent re-check: " + "; ".join(problems))
    return result, tuple(checks), ()


def _train_checks(problem: Problem, catalog: Catalog, table: PlanTable, c: Candidate, dp: int, servers: int,
                  checks: list[str], problems: list[str]) -> TrainResult:
    """The training plan re-run by the performance model at the chosen dp (on a fabric spanning
    leaves at its oversubscription): memory, throughput against the solver's, batch, deadline."""
    group = table.groups[c.group]
    hw = catalog.hardware(group.gpu, group.server, group.fabric)
    if group.spans_leaves(servers):
        hw = hw.oversubscribed(group.oversubscription)
    result = train_step(problem.model, hw, replace(c.plan, dp=dp * c.plan.ep),
                        catalog.train_params(group.gpu, problem.precision, problem.stack),
                        catalog.efficiency.reserved_memory)
    factor = confidence_factor(problem, catalog, group.gpu)
    planned = result.tokens_per_s * factor
    solver_rate = c.replica_tokens_per_s * dp
    gb = c.plan.micro_batch * c.plan.num_micro_batches * dp * c.plan.ep
    (checks if result.fits else problems).append(
        f"memory {result.memory.total / 1e9:,.1f} GB per GPU ≤ {result.memory_capacity / 1e9:,.0f} GB")
    ok = planned >= solver_rate * (1 - 1e-9)
    at = f" x {factor:.3f} at {problem.confidence} % confidence" if problem.confidence else ""
    (checks if ok else problems).append(
        f"throughput at dp={dp}: {result.tokens_per_s:,.0f}{at} ≥ the solver's {solver_rate:,.0f} tokens/s")
    ok = problem.min_global_batch <= gb <= problem.max_global_batch
    (checks if ok else problems).append(
        f"global batch {gb} sequences within [{problem.min_global_batch}, {problem.max_global_batch}]")
    if problem.deadline_s is not None:
        days = problem.tokens / planned / 86400
        ok = days <= problem.deadline_s / 86400 * (1 + 1e-9)
        (checks if ok else problems).append(f"{days:,.1f} days ≤ deadline {problem.deadline_s / 86400:,.1f} days")
    return result


def verify_several(problem: Problem, catalog: Catalog, table: PlanTable, sol: MilpSolution
                   ) -> tuple[tuple[tuple[str, TrainResult], ...], tuple[str, ...], tuple[ServeResult, ...]]:
    """Each workload re-checked on its own (prefixed with its name), then the hardware: per group,
    the GPUs the busiest set of simultaneous workloads uses, priced in closed form."""
    checks: list[str] = []
    problems: list[str] = []
    trained: list[tuple[str, TrainResult]] = []
    served: list[ServeResult] = []
    servers = {p.group: p.servers for p in sol.purchases}
    for phase in problem.phases:
        mine: list[str] = []
        bad: list[str] = []
        if phase.kind == "train":
            c, dp = next((c, dp) for c, dp in sol.plans if c.workload == phase.name)
            trained.append((phase.name, _train_checks(phase.problem, catalog, table, c, dp, servers[c.group],
                                                      mine, bad)))
        else:
            replicas = tuple((r, n) for r, n in sol.replicas if r.workload == phase.name)
            results, _ = _serve_checks(phase.problem, catalog, table, replicas, f"{phase.name}/", mine, bad)
            served += results
        checks += [f"{phase.name}: {line}" for line in mine]
        problems += [f"{phase.name}: {line}" for line in bad]
    _repriced(problem, table, sol, gpus_needed(sol.usage(), targets_of(problem).overlaps), checks, problems)
    _limits(problem, sol, checks, problems)
    if problems:
        raise SolverError("the solver's answer failed the independent re-check: " + "; ".join(problems))
    return tuple(trained), tuple(checks), tuple(served)


def _repriced(problem: Problem, table: PlanTable, sol: MilpSolution, used: dict[str, int],
              checks: list[str], problems: list[str]) -> None:
    """The least hardware for the GPUs used, priced in closed form, against the solver's sums."""
    need = least_purchases(table, used)
    costs = solution_costs(table, targets_of(problem), need, tuple(c for c, _ in sol.plans))
    ok = all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in
             ((costs.capex, sol.capex), (costs.power_w, sol.power_w), (costs.rent, sol.rent)))
    rent = f", ${costs.rent:,.0f} rent" if costs.rent else ""
    (checks if ok else problems).append(
        f"hardware re-priced from the catalog: ${costs.capex:,.0f} capex{rent}, {costs.power_w / 1e3:,.2f} kW "
        f"(solver ${sol.capex:,.0f})")
    if problem.racks is not None and problem.racks.max_racks is not None:
        ok = costs.racks <= problem.racks.max_racks
        (checks if ok else problems).append(f"{costs.racks} racks ≤ {problem.racks.max_racks} on site")


def _limits(problem: Problem, sol: MilpSolution, checks: list[str], problems: list[str]) -> None:
    """The budget and power cap, against the solver's re-priced hardware."""
    if problem.power_cap_w is not None:
        ok = sol.power_w <= problem.power_cap_w * (1 + 1e-9)
        (checks if ok else problems).append(
            f"IT power {sol.power_w / 1e3:,.2f} kW ≤ cap {problem.power_cap_w / 1e3:,.1f} kW")
    if problem.budget_usd is not None:
        spent = spend(problem, sol)
        what = "TCO" if problem.budget_covers == "tco" else ("capex + rent" if sol.rent else "capex")
        ok = spent <= problem.budget_usd * (1 + 1e-9)
        (checks if ok else problems).append(f"{what} ${spent:,.0f} ≤ budget ${problem.budget_usd:,.0f}")


def verify_serving(problem: Problem, catalog: Catalog, table: PlanTable,
                   sol: MilpSolution) -> tuple[tuple[str, ...], tuple[ServeResult, ...]]:
    """Every replica type re-run by the serving model; demand, latency and hardware re-checked."""
    checks: list[str] = []
    problems: list[str] = []
    results, used = _serve_checks(problem, catalog, table, sol.replicas, "", checks, problems)
    _repriced(problem, table, sol, used, checks, problems)
    _limits(problem, sol, checks, problems)
    if problems:
        raise SolverError("the solver's answer failed the independent re-check: " + "; ".join(problems))
    return tuple(checks), results


def _serve_checks(problem: Problem, catalog: Catalog, table: PlanTable,
                  replicas: tuple[tuple[ServeCandidate, int], ...], prefix: str, checks: list[str],
                  problems: list[str]) -> tuple[tuple[ServeResult, ...], dict[str, int]]:
    """Each replica type re-run by the serving model against its class's latency limits, and the
    demand of every class; (results, GPUs used per group). Class names carry ``prefix``."""
    limits = {prefix + d.name: d for d in problem.demands}
    results = []
    used: dict[str, int] = {}
    capacity: dict[str, float] = {}
    for r, count in replicas:
        g = table.groups[r.group]
        res = serve(problem.model, catalog.hardware(g.gpu, g.server, None), r.plan,
                    catalog.serve_params(g.gpu, r.plan.precision, problem.stack))
        results.append(res)
        used[r.group] = used.get(r.group, 0) + r.gpus_per_replica * count
        capacity[r.demand] = capacity.get(r.demand, 0.0) + r.tokens_per_s * count
        d = limits[r.demand]
        factor = confidence_factor(problem, catalog, g.gpu, r.plan.precision, d)
        ok = res.fits and res.output_tokens_per_s * factor >= r.tokens_per_s * (1 - 1e-9)
        ok = ok and (d.tpot_s is None or res.tpot / factor <= d.tpot_s * (1 + 1e-9))
        ok = ok and (d.ttft_s is None or res.ttft / factor <= d.ttft_s * (1 + 1e-9))
        (checks if ok else problems).append(
            f"{count} x {r.key.split('/')[0].split(':')[-1]} TP{r.plan.tp} PP{r.plan.pp} at batch {r.plan.batch}: "
            f"{res.output_tokens_per_s:,.0f} tokens/s each, TPOT {res.tpot * 1e3:,.1f} ms, "
            f"TTFT {res.ttft * 1e3:,.0f} ms, {res.memory_per_gpu / 1e9:,.1f} GB per GPU")
    for d in problem.demands:
        have = capacity.get(prefix + d.name, 0.0)
        ok = have >= d.output_tokens_per_s * (1 - 1e-9)
        (checks if ok else problems).append(
            f"{d.name}: {have:,.0f} ≥ {d.output_tokens_per_s:,.0f} output tokens/s demanded")
    return tuple(results), used


def recommend(problem: Problem, catalog: Catalog, backend: str | None = None,
              time_limit_s: float | None = None, table: PlanTable | None = None) -> Recommendation:
    """Solve ``problem``; raise InfeasibleError with what would make it feasible."""
    table = table or plan_table(problem, catalog)
    backend = backend or problem.solver.backend
    limit = time_limit_s or problem.solver.time_limit_s
    targets = targets_of(problem)
    if not table.candidates and not table.serving:
        reasons = [f"{gpu}: {why}" for gpu, why in sorted(table.gpu_reasons.items())]
        hints = feasibility_hints(problem, catalog, table, backend, limit, fallback=False)
        raise InfeasibleError(f"no GPU in the catalog can run {problem.model_id} under this problem's limits:",
                              reasons + hints)
    sol = solve(table, targets, backend, limit, problem.solver.mip_gap)
    if sol.status == Status.NO_SOLUTION:
        raise SolverError(f"no solution found within {limit:g} s. To fix: raise solver.time_limit_s.")
    if sol.status == Status.INFEASIBLE:
        raise InfeasibleError(f"no cluster meets every target of '{problem.name}'.",
                              feasibility_hints(problem, catalog, table, backend, limit))
    if problem.phases:
        trained, checks, served = verify_several(problem, catalog, table, sol)
        return Recommendation(problem, table, sol, None, checks, served, trained)
    perf, checks, replica_perf = verify(problem, catalog, table, sol)
    return Recommendation(problem, table, sol, perf, checks, replica_perf)


@dataclass(frozen=True)
class Repair:
    """The smallest change of one limit that makes a problem feasible, with the others unchanged."""

    limit: str  # budget | power | deadline
    current: float  # USD, W or seconds
    needed: float  # the least (budget, power) or the shortest (deadline) that works, rounded up

    def apply(self, problem: Problem) -> Problem:
        field = {"budget": "budget_usd", "power": "power_cap_w", "deadline": "deadline_s"}[self.limit]
        return replace(problem, deadline_s=self.needed) if field == "deadline_s" else \
            problem.with_limits(**{field: self.needed})

    def describe(self, problem: Problem) -> str:
        if self.limit == "budget":
            return (f"budget: the least {problem.budget_covers} that meets the other targets is ${self.needed:,.0f}; "
                    f"the budget is ${self.current:,.0f} (+${self.needed - self.current:,.0f})")
        if self.limit == "power":
            return (f"power: the least IT power that meets the other targets is {self.needed / 1e3:,.2f} kW; "
                    f"the cap is {self.current / 1e3:,.1f} kW (+{(self.needed - self.current) / 1e3:,.2f} kW)")
        return (f"deadline: the fastest cluster within the other limits takes {self.needed / 86400:,.3f} days; "
                f"the deadline is {self.current / 86400:,.1f} days (+{(self.needed - self.current) / 86400:,.3f} days)")


def repairs(problem: Problem, catalog: Catalog, table: PlanTable, backend: str, limit: float) -> list[Repair]:
    """For each of budget, power cap and deadline the problem has: the smallest value that makes it
    feasible with the other limits kept, found by one MIP each.

    The budget: minimise capex (or TCO, if that is what the budget covers) without the budget;
    the power cap: minimise IT power without the cap; the deadline: maximise tokens/s without it.
    Plans are re-enumerated without a relaxed budget or cap, which also bound each plan's GPUs.
    Values are rounded up ($1, 10 W, 0.001 day) so that applying them is feasible.
    """
    out = []
    targets = targets_of(problem)
    if problem.budget_usd is not None:
        capex_only = problem.budget_covers == "capex"
        relaxed = replace(targets, budget_usd=None, objective="min_cost")
        if capex_only:
            relaxed = replace(relaxed, opex_usd_per_w=0.0, maintenance=0.0)
        needed = _least(problem, catalog, "budget_usd", relaxed, backend, limit,
                        lambda s: math.ceil(s.capex + s.rent if capex_only else s.tco))
        if needed is not None:
            out.append(Repair("budget", problem.budget_usd, needed))
    if problem.power_cap_w is not None:
        relaxed = replace(targets, power_cap_w=None, objective="min_power")
        needed = _least(problem, catalog, "power_cap_w", relaxed, backend, limit,
                        lambda s: math.ceil(s.power_w / 10) * 10.0)
        if needed is not None:
            out.append(Repair("power", problem.power_cap_w, needed))
    if problem.deadline_s is not None and problem.kind == "train":
        s = _solve_if_any(table, replace(targets, deadline_s=None, objective="min_time"), backend, limit, problem)
        if s is not None and s.tokens_per_s > 0:
            days = math.ceil(problem.tokens / s.tokens_per_s / 86.4) / 1000
            out.append(Repair("deadline", problem.deadline_s, days * 86400))
    return out


def _least(problem: Problem, catalog: Catalog, field: str, relaxed: Targets, backend: str, limit: float,
           measure: Callable[[MilpSolution], float]) -> float | None:
    """The least value of a limit (budget or power cap) at which the problem is feasible.

    A first solve without the limit gives a value v; but plans enumerated under a limit v are
    less conservative than without it (their data-parallel bands end at fewer GPUs), so a
    smaller value may already work: re-solve over the table enumerated at v until it is stable.
    """
    value: float | None = None
    for _ in range(6):
        table = plan_table(problem.with_limits(**{field: value}), catalog)
        s = _solve_if_any(table, relaxed, backend, limit, problem)
        if s is None:
            return value
        fresh = float(measure(s))
        if value is not None and fresh >= value:
            return value
        value = fresh
    return value


def feasibility_hints(problem: Problem, catalog: Catalog, table: PlanTable, backend: str, limit: float,
                      fallback: bool = True) -> list[str]:
    """What single relaxation makes the problem feasible, each priced by a re-solve."""
    found = repairs(problem, catalog, table, backend, limit)
    hints = [r.describe(problem) for r in found]
    if problem.kind == "train" and any(r.limit == "deadline" for r in found):
        hints += deadline_walls(problem, catalog, backend, limit)
    if not hints and fallback:
        hints.append("no single relaxation of budget, power or deadline helps: allow more GPUs "
                     "(hardware.max_gpus), a larger global batch, or more GPU types")
    return hints


def deadline_walls(problem: Problem, catalog: Catalog, backend: str, limit: float) -> list[str]:
    """Past the deadline even at the fastest cluster within the other limits: what the fastest
    cluster without a budget or power cap achieves, and which limit then binds, the global batch
    cap (data parallelism stops at max_global_batch / (micro-batch x micro-batches) replicas) or
    hardware.max_gpus, with the batch, GPUs and money the deadline would take (a linear estimate
    from that cluster's throughput per GPU)."""
    free = problem.with_limits(budget_usd=None, power_cap_w=None)
    targets = replace(targets_of(free), deadline_s=None, objective="min_time")
    table = plan_table(free, catalog)
    s = _solve_if_any(table, targets, backend, limit, free)
    if s is None or s.candidate is None or s.tokens_per_s <= 0 or problem.deadline_s is None:
        return []
    g = table.groups[s.candidate.group]
    gpus = s.dp * s.candidate.gpus_per_replica  # the plan's GPUs (without a budget, unused groups are noise)
    per_gpu = g.gpu_usd + g.server_usd / g.slots  # GPUs and servers, before network
    days = problem.tokens / s.tokens_per_s / 86400
    if days <= problem.deadline_s / 86400:
        return []  # the budget or power cap alone binds: its repair says by how much
    need = problem.tokens / problem.deadline_s / s.tokens_per_s  # times the fastest cluster's speed
    c = s.candidate.plan
    seqs = s.dp * c.micro_batch * c.num_micro_batches
    lines = [f"without a budget or power cap the fastest cluster takes {days:,.1f} days on {gpus:,} x {g.gpu} "
             f"(${gpus * per_gpu:,.0f} of GPUs and servers); the deadline needs {need:,.1f}x its speed: about "
             f"{gpus * need:,.0f} such GPUs at the same speed each, some ${gpus * need * per_gpu:,.0f}"
             + (f" against a budget of ${problem.budget_usd:,.0f}" if problem.budget_usd else "")]
    if seqs * 2 > problem.max_global_batch:
        tokens = problem.max_global_batch * problem.seq_len
        lines.append(f"global batch: the cap of {tokens / 1e6:,.1f}M tokens ({problem.max_global_batch:,} sequences) "
                     f"stops data parallelism at {s.dp:,} replicas; about {tokens * need / 1e6:,.0f}M tokens per step "
                     "would be needed (workload.global_batch.max_tokens), at some cost in convergence")
    if gpus * 2 > problem.max_gpus:
        lines.append(f"GPU count: hardware.max_gpus is {problem.max_gpus:,}; about {gpus * need:,.0f} would be needed")
    return lines


def _solve_if_any(table: PlanTable, targets: Targets, backend: str, limit: float,
                  problem: Problem) -> MilpSolution | None:
    """The relaxed problem's solution, or None if it has no plan or is infeasible too."""
    if not table.candidates and not table.serving:
        return None
    s = solve(table, targets, backend, limit, problem.solver.mip_gap, tie_break=False)
    return s if s.status in (Status.OPTIMAL, Status.FEASIBLE) else None
