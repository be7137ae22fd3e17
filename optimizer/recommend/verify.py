"""The solver's answer re-checked without the solver, as ``Check`` records.

Every chosen plan is re-run by the performance model at the data-parallel degree (training) or
batch (serving) the solver chose, its hardware is re-priced from the catalog in closed form, and
the budget and power cap are compared with what that costs. Each comparison is one ``Check``;
``verify`` raises ``SolverError`` naming every one that failed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from typing_extensions import assert_never

from optimizer.catalog import Catalog
from optimizer.errors import SolverError
from optimizer.milp import MilpSolution, Targets, least_purchases, solution_costs
from optimizer.perf.goodput import goodput
from optimizer.perf.serve import ServeResult, serve
from optimizer.perf.train import TrainResult, train_step
from optimizer.plans import Candidate, PlanTable, ServeCandidate
from optimizer.plans.portfolio import gpus_needed
from optimizer.problem import Problem, ServeWorkload, TrainWorkload, confidence_factor
from optimizer.problem.enums import BudgetCovers
from optimizer.recommend.targets import spend

SLACK = 1e-9  # relative: a value this close to its limit holds (the solver's own tolerance is coarser)
# plans hold a band's two ends to the MFU ceiling; a dp inside it may run a little faster than either
MFU_SLACK = 0.02


@dataclass(frozen=True, kw_only=True)
class Check:
    """One re-checked condition: what was measured against which limit, and whether it holds.

    ``what`` names the condition (memory, throughput, global_batch, deadline, replica, demand,
    hardware, racks, power, budget); ``measured`` and ``limit`` are in its natural unit (bytes,
    tokens/s, sequences, days, USD or W; for ``hardware``, the re-priced capex against the
    solver's); ``text`` is the sentence the outputs print."""

    what: str
    ok: bool
    measured: float
    limit: float
    text: str

    def named(self, prefix: str) -> Check:
        """The same check, its text prefixed (a workload's name in a several-workload problem)."""
        return replace(self, text=f"{prefix}: {self.text}")


def at_most(what: str, measured: float, limit: float, text: str) -> Check:
    return Check(what=what, ok=measured <= limit * (1 + SLACK), measured=measured, limit=limit, text=text)


def at_least(what: str, measured: float, limit: float, text: str) -> Check:
    return Check(what=what, ok=measured >= limit * (1 - SLACK), measured=measured, limit=limit, text=text)


def passed(checks: Iterable[Check]) -> tuple[Check, ...]:
    """``checks`` as a tuple, or SolverError listing every failed one."""
    checks = tuple(checks)
    failed = [c.text for c in checks if not c.ok]
    if failed:
        raise SolverError("the solver's answer failed the independent re-check: " + "; ".join(failed))
    return checks


def train_checks(problem: Problem, w: TrainWorkload, catalog: Catalog, table: PlanTable, c: Candidate, dp: int,
                 servers: int) -> tuple[TrainResult, list[Check]]:
    """The training plan re-run by the performance model at the chosen dp (on a fabric spanning
    leaves at its oversubscription): memory, throughput against the solver's, batch, deadline."""
    group = table.groups[c.group]
    hw = catalog.hardware(group.gpu, group.server, group.fabric)
    if group.spans_leaves(servers):
        hw = hw.oversubscribed(group.oversubscription)
    result = train_step(w.model, hw, replace(c.plan, dp=dp * c.plan.ep),
                        catalog.train_params(group.gpu, w.precision, w.stack),
                        catalog.efficiency.reserved_memory, problem.memory_headroom)
    factor = confidence_factor(problem, catalog, group.gpu)
    good = goodput(c.gpus_per_replica * dp, group.reliability(problem.reliability)).fraction
    planned = result.tokens_per_s * factor * good  # what the solver planned with: failures counted
    solver_rate = c.replica_tokens_per_s * dp
    gb = c.plan.micro_batch * c.plan.num_micro_batches * dp * c.plan.ep
    at = f" x {factor:.3f} at {problem.confidence} % confidence" if problem.confidence else ""
    at += f" x {good:.3f} goodput" if good < 1.0 else ""
    checks = [
        Check(what="memory", ok=result.fits, measured=result.memory.total, limit=result.memory_capacity,
              text=f"memory {result.memory.total / 1e9:,.1f} GB per GPU ≤ {result.memory_capacity / 1e9:,.1f} GB "
                   f"usable of {result.memory_total / 1e9:,.1f} ({problem.memory_headroom:.0%} headroom)"),
        at_least("throughput", planned, solver_rate,
                 f"throughput at DP={dp * c.plan.ep}: {result.tokens_per_s:,.0f}{at} ≥ the solver's "
                 f"{solver_rate:,.0f} tokens/s"),
        Check(what="global_batch", ok=w.min_global_batch <= gb <= w.max_global_batch, measured=gb,
              limit=w.max_global_batch,
              text=f"global batch {gb} sequences within [{w.min_global_batch}, {w.max_global_batch}]"),
    ]
    ceiling = catalog.mfu_ceiling(group.gpu, w.precision)
    if ceiling is not None:  # above it the model, not the plan, would be wrong (plans checks its band's ends)
        checks.append(at_most("mfu", result.mfu, ceiling.value * (1 + MFU_SLACK),
                              f"MFU {result.mfu:.1%} ≤ {ceiling.value:.1%}, the most published dense runs reached "
                              f"{catalog.mfu_ceiling_scope(group.gpu, w.precision)} ({ceiling.row}, {ceiling.source})"))
    if w.deadline_s is not None:
        days, deadline = w.tokens / planned / 86400, w.deadline_s / 86400
        checks.append(at_most("deadline", days, deadline, f"{days:,.1f} days ≤ deadline {deadline:,.1f} days"))
    return result, checks


def serve_checks(problem: Problem, w: ServeWorkload, catalog: Catalog, table: PlanTable,
                 replicas: tuple[tuple[ServeCandidate, int], ...], prefix: str
                 ) -> tuple[tuple[ServeResult, ...], list[Check]]:
    """Each replica type re-run by the serving model against its class's latency limits, and the
    demand of every class: (results, checks). Class names carry ``prefix``."""
    limits = {prefix + d.name: d for d in w.demands}
    results = []
    capacity: dict[str, float] = {}
    checks = []
    for r, count in replicas:
        g = table.groups[r.group]
        res = serve(w.model, catalog.hardware(g.gpu, g.server, None), r.plan,
                    catalog.serve_params(g.gpu, r.plan.precision, w.stack))
        results.append(res)
        capacity[r.demand] = capacity.get(r.demand, 0.0) + r.tokens_per_s * count
        d = limits[r.demand]
        factor = confidence_factor(problem, catalog, g.gpu, r.plan.precision, d)
        ok = res.fits and res.output_tokens_per_s * factor >= r.tokens_per_s * (1 - SLACK)
        ok = ok and (d.tpot_s is None or res.tpot / factor <= d.tpot_s * (1 + SLACK))
        ok = ok and (d.ttft_s is None or res.ttft / factor <= d.ttft_s * (1 + SLACK))
        checks.append(Check(
            what="replica", ok=ok, measured=res.output_tokens_per_s * factor, limit=r.tokens_per_s,
            text=f"{count} x {r.key.split('/')[0].split(':')[-1]} TP{r.plan.tp} PP{r.plan.pp}"
                 f"{' attention-DP' if r.plan.attention_dp else ''} at batch "
                 f"{r.plan.batch}: {res.output_tokens_per_s:,.0f} tokens/s each, TPOT {res.tpot * 1e3:,.1f} ms, "
                 f"TTFT {res.ttft * 1e3:,.0f} ms, {res.memory_per_gpu / 1e9:,.1f} GB per GPU"))
    for d in w.demands:
        have = capacity.get(prefix + d.name, 0.0)
        checks.append(at_least("demand", have, d.output_tokens_per_s,
                               f"{d.name}: {have:,.0f} ≥ {d.output_tokens_per_s:,.0f} output tokens/s demanded"))
    return tuple(results), checks


def hardware_checks(problem: Problem, targets: Targets, table: PlanTable, sol: MilpSolution,
                    used: dict[str, int]) -> list[Check]:
    """The least hardware for the GPUs used, priced in closed form, against the solver's sums."""
    need = least_purchases(table, used)
    costs = solution_costs(table, targets, need, tuple(c for c, _ in sol.plans))
    ok = all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in
             ((costs.capex, sol.capex), (costs.power_w, sol.power_w), (costs.rent, sol.rent)))
    rent = f", ${costs.rent:,.0f} rent" if costs.rent else ""
    checks = [Check(what="hardware", ok=ok, measured=costs.capex, limit=sol.capex,
                    text=f"hardware re-priced from the catalog: ${costs.capex:,.0f} capex{rent}, "
                         f"{costs.power_w / 1e3:,.2f} kW (solver ${sol.capex:,.0f})")]
    if problem.racks is not None and problem.racks.max_racks is not None:
        checks.append(Check(what="racks", ok=costs.racks <= problem.racks.max_racks, measured=costs.racks,
                            limit=problem.racks.max_racks,
                            text=f"{costs.racks} racks ≤ {problem.racks.max_racks} on site"))
    return checks


def limit_checks(problem: Problem, sol: MilpSolution) -> list[Check]:
    """The power cap and the budget, against the solver's re-priced hardware."""
    checks = []
    if problem.power_cap_w is not None:
        text = (f"IT power {sol.power_w / 1e3:,.2f} kW ≤ cap {problem.power_cap_w / 1e3:,.1f} kW"
                if problem.facility_power_cap_w is None else
                f"{problem.power_text(sol.power_w)} ≤ the facility cap {problem.facility_power_cap_w / 1e3:,.1f} kW"
                + (f" and the IT cap {problem.power_cap_w / 1e3:,.1f} kW" if problem.power_field == "site.power_cap_kw"
                   else ""))
        checks.append(at_most("power", sol.power_w, problem.power_cap_w, text))
    if problem.budget_usd is not None:
        spent = spend(problem, sol)
        what = "TCO" if problem.budget_covers is BudgetCovers.TCO else ("capex + rent" if sol.rent else "capex")
        checks.append(at_most("budget", spent, problem.budget_usd,
                              f"{what} ${spent:,.0f} ≤ budget ${problem.budget_usd:,.0f}"))
    return checks


def workload_checks(problem: Problem, catalog: Catalog, table: PlanTable, sol: MilpSolution
                    ) -> tuple[tuple[tuple[str, TrainResult], ...], list[Check], tuple[ServeResult, ...]]:
    """Each workload re-checked on its own: (training results by workload name, checks, serving
    results). With several workloads each one's plans are those the solver keyed to it, and its
    checks and request classes carry its name."""
    several = len(problem.workloads) > 1
    checks: list[Check] = []
    trained: list[tuple[str, TrainResult]] = []
    served: list[ServeResult] = []
    servers = {p.group: p.servers for p in sol.purchases}
    for w in problem.workloads:
        alone = problem.alone(w)
        match w:
            case TrainWorkload():
                if several:
                    c, dp = next((c, dp) for c, dp in sol.plans if c.workload == w.name)
                    n = servers[c.group]
                elif sol.candidate is None or sol.counts is None:
                    raise SolverError("verify() needs a solution with a chosen plan")
                else:
                    c, dp, n = sol.candidate, sol.dp, sol.counts.servers
                result, mine = train_checks(alone, w, catalog, table, c, dp, n)
                trained.append((w.name, result))
            case ServeWorkload():
                replicas = tuple((r, k) for r, k in sol.replicas if r.workload == w.name) if several else sol.replicas
                results, mine = serve_checks(alone, w, catalog, table, replicas, f"{w.name}/" if several else "")
                served += results
            case never:
                assert_never(never)
        checks += [c.named(w.name) for c in mine] if several else mine
    return tuple(trained), checks, tuple(served)


def used_gpus(problem: Problem, sol: MilpSolution, overlaps: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    """GPUs per group the answer needs: the training plan's, or every replica's, or for several
    workloads the busiest set of simultaneous ones."""
    if len(problem.workloads) > 1:
        return gpus_needed(sol.usage(), overlaps)
    if sol.candidate is not None:
        return {sol.candidate.group: sol.candidate.gpus_per_replica * sol.dp}
    used: dict[str, int] = {}
    for r, count in sol.replicas:
        used[r.group] = used.get(r.group, 0) + r.gpus_per_replica * count
    return used
