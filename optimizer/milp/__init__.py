"""Stage 5: one mixed-integer program over the candidate plans and the integer infrastructure.

Sets
    C          training plan templates (``plans.Candidate``); C_h those on hardware group h
    R          serving replica types (``plans.ServeCandidate``); R_h on group h, R_k for class k
    K          request classes of a serving workload, each with a demand D_k (output tokens/s)
    H          hardware groups: GPU × server type × fabric (or a single server, or independent
               serving servers)
Data (per c)   mp_c = TP·PP GPUs per replica, r_c tokens/s per replica, [dpmin_c, dpmax_c]
Data (per h)   slots, GPU/server/NIC-port/switch prices and powers, switch radix P_h,
               switch ports per server q_h
Variables
    x_c ∈ {0,1}     plan c is the one used            dp_c ∈ ℤ≥0   its data-parallel degree
    n_r ∈ ℤ≥0       replicas of serving type r (0 ≤ n_r ≤ ⌈D_k / rate_r⌉: more is never cheaper)
    G_h ∈ ℤ≥0       GPUs bought                       S_h ∈ ℤ≥0    servers bought
    L_h, K_h ∈ ℤ≥0  leaf and spine switches           y_h ∈ {0,1}  more than one switch
Constraints
    (1) Σ_{c∈C_w} x_c = 1                                    one plan per training workload w
    (2) dpmin_c·x_c ≤ dp_c ≤ dpmax_c·x_c                     dp only for the chosen plan
    (3) G_h ≥ Σ_{w∈Q} U_hw for every set Q of workloads that run at the same time, where
        U_hw = Σ_{c∈C_hw} mp_c·dp_c + Σ_{r∈R_hw} gpus_r·n_r  GPUs to run it all: workloads at the
                                                             same time on their own GPUs, one after
                                                             another on the same ones (one workload:
                                                             one set)
    (4) G_h ≤ slots_h·S_h   (= for baseboards sold full)     servers to hold them
    (5) a plan without a fabric fits one server: its dp range stops at slots / (TP·PP), so two such
        jobs at once take a server each; serving replicas each fit in one server and are powers of
        two dividing its slots, so (4) packs them exactly
    (6) L_h ≥ q_h·S_h / P_h;  L_h ≥ Σ_{c∈C_h} x_c;  q_h·S_h ≤ P_h + M·y_h;
        L_h ≥ q_h·S_h / d_h − M'(1−y_h);  P_h·K_h ≥ u_h·L_h − M''(1−y_h);  E_h ≥ u_h·L_h − M''(1−y_h)
                                                             one switch, or a two-tier fat tree whose
                                                             leaves give d_h ports to servers and
                                                             u_h = ⌈d_h / o⌉ to spines at the problem's
                                                             oversubscription o (o = 1: d = P/2); E_h
                                                             leaf-spine links, q_h·S_h server links
    (7) T = Σ_c r_c·dp_c                                     tokens/s
    (8) T_w ≥ tokens_w / deadline_w for each training workload (min_cost)
    (9) capex = Σ_h gpu$·G_h + (server$ + q_h·(port$ + cable$))·S_h + switch$·(L_h + K_h) + uplink$·E_h
    (10) W = Σ_h gpuW·G_h + (serverW + q_h·(portW + cableW))·S_h + switchW·(L_h + K_h) + uplinkW·E_h
         ≤ power cap
    (11) capex ≤ budget  (or capex + opex ≤ budget when the budget covers TCO)
    (12) Σ_{r∈R_k} rate_r·n_r ≥ D_k for every request class k
    (13) owned inventory: OG_h ≤ G_h, OS_h ≤ S_h, Σ_{h∈pool} OG_h ≤ owned GPUs, Σ OS_h ≤ owned
         servers; (9) then buys only G_h − OG_h GPUs and S_h − OS_h servers (NICs too where the owned
         servers carry them); the owned parts still draw power and pay maintenance; a group the site
         takes no more of (an owned tower in a data centre) has G_h ≤ OG_h and S_h ≤ OS_h
    (3r) a rented group (a cloud offer) has G_h = the GPUs used, no capex, no site power, no switches;
    (14) rent = rate·hours·G_h (serving, or a committed term), or for training on demand the job's
         GPU-hours Σ_c x_c·rate·tokens·mp_c / (r_c·3600), which do not depend on dp
    (15) availability: Σ bought G_h − OG_h of a GPU (0 where the region or buy switch forbids it),
         Σ bought servers of a type, Σ rented G_h of an offer, each ≤ its cap
    (16) racks (when modelled): R·kW ≥ W, R·U ≥ Σ_h U_h·S_h + switches, R ≤ racks on site / floor;
         new racks are capex when the site has no rack count
    value = catalog value of the on-site hardware in use (owned too)
    opex = W · (load factor · PUE · hours · $/kWh + colocation $/kW-month · months) + maintenance · value
    TCO = capex + opex + rent; (11) bounds capex + rent (or the TCO) by the budget
Objective
    min_cost: minimise TCO;  min_time: maximise T;  min_power: minimise W (used to price the
    smallest power cap that makes a problem feasible).  A second pass fixes the optimum and takes,
    among equally good answers, the cheapest (min_time) or the fastest / most capacity (min_cost).
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from optimizer.errors import SolverError
from optimizer.milp.costs import (  # re-exported (see __all__): the closed forms the MIP is checked against
    Costs,
    GroupCount,
    Targets,
    capex_parts,
    fabric_links,
    group_costs,
    job_gpu_hours,
    least_purchases,
    network_switches,
    purchase,
    racks_needed,
    rent_cost,
    solution_costs,
)
from optimizer.plans import Candidate, Group, PlanTable, ServeCandidate

__all__ = [
    "BACKENDS", "ORTOOLS_ENGINE", "MilpSolution", "Status", "replica_bound", "solve",
    # re-exported from optimizer.milp.costs
    "Costs", "GroupCount", "Targets", "capex_parts", "fabric_links", "group_costs", "job_gpu_hours",
    "least_purchases", "network_switches", "purchase", "racks_needed", "rent_cost", "solution_costs",
]

BACKENDS = ("ortools", "pulp")
ORTOOLS_ENGINE = "HIGHS"  # OR-Tools' linear-solver wrapper around HiGHS; "SCIP" also works, but
# on the shipped problems its tie-breaking pass ran 5-15x slower (benchmarks/solve_times.py)


class Status(enum.Enum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible (time limit; not proven optimal)"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no solution found within the time limit"


@dataclass(frozen=True)
class MilpSolution:
    status: Status
    backend: str
    objective: float | None
    bound: float | None
    gap: float | None
    candidate: Candidate | None  # the training plan, if the problem trains
    dp: int
    replicas: tuple[tuple[ServeCandidate, int], ...]  # serving replica types used, with counts
    purchases: tuple[GroupCount, ...]  # every hardware group bought, by key
    tokens_per_s: float  # training throughput
    capex: float
    power_w: float
    opex: float  # electricity, colocation and maintenance over the horizon
    solve_seconds: float
    variables: int
    constraints: int
    costs: Costs | None = None  # every term, None when there is no solution
    plans: tuple[tuple[Candidate, int], ...] = ()  # every training plan chosen with its dp (one per workload)

    @property
    def rent(self) -> float:
        return self.costs.rent if self.costs is not None else 0.0

    @property
    def tco(self) -> float:
        return self.capex + self.opex + self.rent

    @property
    def counts(self) -> GroupCount | None:
        """What the training plan's group buys."""
        if self.candidate is None:
            return None
        return next((p for p in self.purchases if p.group == self.candidate.group), None)

    def usage(self) -> dict[str, dict[str, int]]:
        """GPUs each workload uses, per group: workload -> group -> GPUs ('' with one workload)."""
        out: dict[str, dict[str, int]] = {}
        for c, dp in self.plans:
            mine = out.setdefault(c.workload, {})
            mine[c.group] = mine.get(c.group, 0) + c.gpus_per_replica * dp
        for r, n in self.replicas:
            mine = out.setdefault(r.workload, {})
            mine[r.group] = mine.get(r.group, 0) + r.gpus_per_replica * n
        return out

    def serving_capacity(self) -> dict[str, float]:
        """Output tokens/s per request class."""
        out: dict[str, float] = {}
        for r, n in self.replicas:
            out[r.demand] = out.get(r.demand, 0.0) + r.tokens_per_s * n
        return out


def replica_bound(r: ServeCandidate, targets: Targets) -> int:
    """More than ⌈D_k / rate⌉ replicas of one type is never needed (one type alone covers D_k)."""
    demand = dict(targets.demands).get(r.demand, 0.0)
    return max(0, math.ceil(demand / r.tokens_per_s - 1e-9))


def _bounds(table: PlanTable, targets: Targets) -> dict[str, tuple[int, int]]:
    """Per group: most GPUs and servers any solution could need (tight big-M values)."""
    largest: dict[tuple[str, str], int] = {}
    for c in table.candidates:  # one training plan per workload: the largest of them
        key = (c.group, c.workload)
        largest[key] = max(largest.get(key, 0), c.gpus_per_replica * c.dp_max)
    gpus: dict[str, int] = {}
    for (h, _), most in largest.items():
        gpus[h] = gpus.get(h, 0) + most
    serving: dict[str, int] = {}
    for r in table.serving:  # serving replicas add up
        serving[r.group] = serving.get(r.group, 0) + r.gpus_per_replica * replica_bound(r, targets)
    out: dict[str, tuple[int, int]] = {}
    for h in set(gpus) | set(serving):
        g = table.groups[h]
        servers = math.ceil((gpus.get(h, 0) + serving.get(h, 0)) / g.slots)
        out[h] = (servers * g.slots, servers)
    return out


def _leaf_bound(g: Group, servers: int) -> int:
    """Most leaf switches ``servers`` can need (also the most spines, since u_h ≤ P_h)."""
    return max(1, math.ceil(g.ports_per_server * servers / g.leaf_down))


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner from C++ straight to file descriptor 1, past SuppressOutput();
    park fd 1 on /dev/null while it solves so `--format json` stays clean."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real fd 1 (e.g. captured by a test runner)
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


class _Model:
    """The few modelling calls both backends need, so the formulation is written once."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        if backend == "ortools":
            from ortools.linear_solver import pywraplp

            self._pywraplp = pywraplp
            self.m = pywraplp.Solver.CreateSolver(ORTOOLS_ENGINE)
            if self.m is None:
                raise SolverError(f"OR-Tools was built without {ORTOOLS_ENGINE}. "
                                  "To fix: pip install --force-reinstall ortools.")
            self.m.SuppressOutput()
        elif backend == "pulp":
            import pulp

            self._pulp = pulp
            self.m = pulp.LpProblem("gpuopt", pulp.LpMinimize)
        else:
            raise SolverError(f"unknown solver backend '{backend}'. To fix: use one of {', '.join(BACKENDS)}.")
        self.n_vars = 0
        self.n_cons = 0

    def int_var(self, lb: float, ub: float, name: str) -> Any:
        self.n_vars += 1
        if self.backend == "ortools":
            return self.m.IntVar(lb, ub, name)
        return self._pulp.LpVariable(name, lb, ub, cat="Integer")

    def bool_var(self, name: str) -> Any:
        return self.int_var(0, 1, name)

    def total(self, terms: list[Any]) -> Any:
        if self.backend == "ortools":
            return self.m.Sum(terms) if terms else 0
        return self._pulp.lpSum(terms)

    def add(self, constraint: Any, name: str) -> None:
        self.n_cons += 1
        if self.backend == "ortools":
            self.m.Add(constraint, name)
        else:
            self.m += constraint, name

    def set_objective(self, expr: Any, maximize: bool) -> None:
        if self.backend == "ortools":
            (self.m.Maximize if maximize else self.m.Minimize)(expr)
        else:
            self.m.sense = self._pulp.LpMaximize if maximize else self._pulp.LpMinimize
            self.m.setObjective(expr)

    def solve(self, time_limit_s: float, mip_gap: float) -> tuple[Status, float | None, float | None]:
        """(status, objective, best bound)."""
        if self.backend == "ortools":
            self.m.SetTimeLimit(int(max(1.0, time_limit_s) * 1000))
            params = self._pywraplp.MPSolverParameters()
            params.SetDoubleParam(params.RELATIVE_MIP_GAP, mip_gap)
            with _quiet_stdout():
                code = self.m.Solve(params)
            S = self._pywraplp.Solver
            if code == S.OPTIMAL:
                status = Status.OPTIMAL
            elif code == S.FEASIBLE:
                status = Status.FEASIBLE
            elif code == S.INFEASIBLE:
                return Status.INFEASIBLE, None, None
            elif code == S.NOT_SOLVED:
                return Status.NO_SOLUTION, None, None
            else:
                raise SolverError(f"{ORTOOLS_ENGINE} stopped with result code {code} (unbounded or abnormal).")
            return status, self.m.Objective().Value(), self.m.Objective().BestBound()
        pulp = self._pulp
        solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, int(math.ceil(time_limit_s))),
                                   gapRel=mip_gap, threads=1)
        self.m.solve(solver)
        if self.m.status == pulp.LpStatusInfeasible:
            return Status.INFEASIBLE, None, None
        if self.m.sol_status == pulp.LpSolutionOptimal:
            status = Status.OPTIMAL
        elif self.m.sol_status == pulp.LpSolutionIntegerFeasible:
            status = Status.FEASIBLE
        elif self.m.status == pulp.LpStatusNotSolved or self.m.sol_status == pulp.LpSolutionNoSolutionFound:
            return Status.NO_SOLUTION, None, None
        else:
            raise SolverError(f"CBC stopped with status {pulp.LpStatus[self.m.status]}.")
        value = pulp.value(self.m.objective)
        return status, value, None

    def value(self, var: Any) -> float:
        if self.backend == "ortools":
            solved: float = var.solution_value()
            return solved
        return var.value() or 0.0


def solve(table: PlanTable, targets: Targets, backend: str = "ortools", time_limit_s: float = 60.0,  # noqa: C901 (debt: split it, issue 14)
          mip_gap: float = 1e-6, tie_break: bool = True) -> MilpSolution:
    """Build the program above over ``table`` and solve it. Same signature for both backends."""
    import time

    if not table.candidates and not table.serving:
        raise SolverError("no candidate plans to choose from")
    start = time.perf_counter()
    model = _Model(backend)
    # --- variables -------------------------------------------------------------------------
    x = {c.key: model.bool_var(f"x[{c.key}]") for c in table.candidates}
    dp = {c.key: model.int_var(0, c.dp_max, f"dp[{c.key}]") for c in table.candidates}
    n = {r.key: model.int_var(0, replica_bound(r, targets), f"replicas[{r.key}]") for r in table.serving}
    bounds = _bounds(table, targets)
    G, S, L, K, Y, E, OG, OS = {}, {}, {}, {}, {}, {}, {}, {}
    for h, g in sorted(table.groups.items()):
        gmax, smax = bounds[h]
        G[h] = model.int_var(0, gmax, f"gpus[{h}]")
        S[h] = model.int_var(0, smax, f"servers[{h}]")
        if g.fabric is not None and not g.rented:
            lmax = _leaf_bound(g, smax)
            L[h] = model.int_var(0, lmax, f"leaf[{h}]")
            K[h] = model.int_var(0, lmax, f"spine[{h}]")
            Y[h] = model.bool_var(f"multi_switch[{h}]")
            E[h] = model.int_var(0, lmax * g.leaf_up, f"uplinks[{h}]")
        if g.pool is not None:
            OG[h] = model.int_var(0, min(g.owned_gpus, gmax), f"owned_gpus[{h}]")
            OS[h] = model.int_var(0, min(g.owned_servers, smax), f"owned_servers[{h}]")
    by_group: dict[str, list[Candidate]] = {}
    for c in table.candidates:
        by_group.setdefault(c.group, []).append(c)
    replicas_on: dict[str, list[ServeCandidate]] = {}
    for r in table.serving:
        replicas_on.setdefault(r.group, []).append(r)
    jobs = {w: (tokens, seconds) for w, tokens, seconds in targets.training_jobs()}
    work = sorted({c.workload for c in table.candidates} | {r.workload for r in table.serving})
    # --- constraints -----------------------------------------------------------------------
    for w in sorted({c.workload for c in table.candidates}):  # (1) one plan per training workload
        model.add(model.total([x[c.key] for c in table.candidates if c.workload == w]) == 1,
                  f"one_plan[{w}]" if w else "one_plan")
    for c in table.candidates:  # (2)
        model.add(dp[c.key] >= c.dp_min * x[c.key], f"dp_min[{c.key}]")
        model.add(dp[c.key] <= c.dp_max * x[c.key], f"dp_max[{c.key}]")
    capex_terms, value_terms, power_terms, rent_terms, units_terms = [], [], [], [], []
    caps: dict[tuple[str, str], list[Any]] = {}  # (kind, id) -> units bought (or rented) that count against a cap
    for h, g in sorted(table.groups.items()):
        cands = by_group.get(h, [])
        used = {w: ([c.gpus_per_replica * dp[c.key] for c in cands if c.workload == w]
                    + [r.gpus_per_replica * n[r.key] for r in replicas_on.get(h, []) if r.workload == w])
                for w in work}
        if g.rented:  # (3r) rented GPUs are exactly those used: they are billed
            model.add(G[h] == model.total([u for w in work for u in used[w]]), f"gpus[{h}]")
        else:  # (3) enough GPUs for the workloads that run at the same time, for each such set
            for i, running in enumerate(targets.overlaps or (tuple(work),)):
                model.add(G[h] >= model.total([u for w in running for u in used.get(w, [])]),
                          f"gpus[{h}]" + (f"[{i}]" if targets.overlaps else ""))
        if g.full_only:  # (4)
            model.add(G[h] == g.slots * S[h], f"full_servers[{h}]")
        else:
            model.add(G[h] <= g.slots * S[h], f"slots[{h}]")
        bought_g, bought_s = G[h], S[h]
        if g.pool is not None:  # (13) owned parts first: they cost nothing to buy
            model.add(OG[h] <= G[h], f"owned_gpus_used[{h}]")
            model.add(OS[h] <= S[h], f"owned_servers_used[{h}]")
            if g.owned_only:  # nothing bought into a chassis the site takes no more of
                model.add(G[h] <= OG[h], f"owned_only_gpus[{h}]")
                model.add(S[h] <= OS[h], f"owned_only_servers[{h}]")
            bought_g, bought_s = G[h] - OG[h], S[h] - OS[h]
        if g.rented:
            caps.setdefault(("offer", g.offer or ""), []).append(G[h])
            if g.rent_hours > 0:  # (14) capacity billed for its hours; on demand, the job's GPU-hours
                rent_terms.append(g.rent_usd_per_gpu_h * g.rent_hours * G[h])
            else:
                rent_terms += [g.rent_usd_per_gpu_h * job_gpu_hours(c, jobs.get(c.workload, (targets.tokens,))[0])
                               * x[c.key] for c in cands]
            continue
        caps.setdefault(("gpu", g.gpu), []).append(bought_g)
        caps.setdefault(("server", g.server), []).append(bought_s)
        switches = uplinks = 0
        if g.fabric is not None:  # (6)
            q, P, d, u = g.ports_per_server, g.switch_ports, g.leaf_down, g.leaf_up
            smax = bounds[h][1]
            lmax = _leaf_bound(g, smax)  # L's upper bound: the M that switches the two-tier rows off
            model.add(L[h] * P >= q * S[h], f"leaf_ports[{h}]")
            spanning = [x[c.key] for c in cands if c.gpus_per_replica * c.dp_min > g.slots]
            # at most one plan per workload: a spanning plan of any workload needs a switch (L ≥ 1)
            jobs_spanning = len({c.workload for c in cands if c.gpus_per_replica * c.dp_min > g.slots})
            model.add(max(1, jobs_spanning) * L[h] >= model.total(spanning), f"leaf_needed[{h}]")
            model.add(q * S[h] <= P + q * smax * Y[h], f"one_switch[{h}]")
            model.add(L[h] >= (q / d) * S[h] - lmax * (1 - Y[h]), f"fat_tree_leaf[{h}]")
            model.add(P * K[h] >= u * L[h] - u * lmax * (1 - Y[h]), f"fat_tree_spine[{h}]")
            model.add(E[h] >= u * L[h] - u * lmax * (1 - Y[h]), f"fat_tree_uplinks[{h}]")
            switches, uplinks = L[h] + K[h], E[h]
        port_usd = g.ports_per_server * (g.port_usd + g.cable_usd)
        capex_terms += [g.gpu_usd * bought_g, (g.server_usd + targets.install_usd_per_server) * bought_s,
                        port_usd * (bought_s if g.owned_nics else S[h]), g.switch_usd * switches,
                        g.uplink_usd * uplinks]
        value_terms += [g.gpu_usd * G[h], (g.server_usd + port_usd) * S[h], g.switch_usd * switches,
                        g.uplink_usd * uplinks]
        power_terms += [g.gpu_w * G[h], (g.server_w + g.ports_per_server * (g.port_w + g.cable_w)) * S[h],
                        g.switch_w * switches, g.uplink_w * uplinks]
        units_terms += [g.rack_units * S[h], switches]
    pools: dict[str, tuple[int, int, list[str]]] = {}
    for h, g in sorted(table.groups.items()):
        if g.pool is not None:
            pools.setdefault(g.pool, (g.owned_gpus, g.owned_servers, []))[2].append(h)
    for pool, (gpus, servers, members) in sorted(pools.items()):  # (13) groups share one inventory
        if len(members) > 1:
            model.add(model.total([OG[h] for h in members]) <= gpus, f"pool_gpus[{pool}]")
            model.add(model.total([OS[h] for h in members]) <= servers, f"pool_servers[{pool}]")
    limits = {("server", k): v for k, v in targets.server_caps}
    for g in table.groups.values():
        if g.buy_cap is not None:
            limits[("offer" if g.rented else "gpu", g.offer or g.gpu)] = g.buy_cap
    for key, cap in sorted(limits.items()):  # (15) availability: at most N units bought or rented
        if key in caps:
            model.add(model.total(caps[key]) <= cap, f"cap[{key[0]}:{key[1]}]")
    power = model.total(power_terms)  # (10)
    if targets.racks is not None:  # (16) racks by power and by height
        rk = targets.racks
        most = rk.max_racks
        if most is None:  # enough racks for every group at its bounds, by power and by height
            watts = units = 0.0
            for h, g in table.groups.items():
                gmax, smax = bounds[h]
                switches = 2 * _leaf_bound(g, smax) if h in L else 0
                links = _leaf_bound(g, smax) * g.leaf_up if h in L else 0
                watts += (gmax * g.gpu_w + smax * (g.server_w + g.ports_per_server * (g.port_w + g.cable_w))
                          + switches * g.switch_w + links * g.uplink_w)
                units += smax * g.rack_units + switches
            most = math.ceil(watts / rk.kw) + math.ceil(units / rk.units) + 1
        R = model.int_var(0, most, "racks")
        model.add(R * rk.kw >= power, "rack_power")
        model.add(R * rk.units >= model.total(units_terms), "rack_units")
        if rk.count is None:
            capex_terms.append(rk.usd * R)
    for k, demand in targets.demands:  # (12)
        model.add(model.total([r.tokens_per_s * n[r.key] for r in table.serving if r.demand == k]) >= demand,
                  f"demand[{k}]")
    throughput = model.total([c.replica_tokens_per_s * dp[c.key] for c in table.candidates])  # (7)
    capacity = model.total([r.tokens_per_s * n[r.key] for r in table.serving])
    capex = model.total(capex_terms)  # (9)
    rent = model.total(rent_terms)
    tco = capex + targets.opex_usd_per_w * power + targets.maintenance * model.total(value_terms) + rent
    for w, (tokens, seconds) in sorted(jobs.items()):  # (8) each training workload by its deadline
        if seconds and tokens and any(c.workload == w for c in table.candidates):
            rate = model.total([c.replica_tokens_per_s * dp[c.key] for c in table.candidates if c.workload == w])
            model.add(rate >= tokens / seconds, f"deadline[{w}]" if w else "deadline")
    if targets.power_cap_w is not None:
        model.add(power <= targets.power_cap_w, "power_cap")
    if targets.budget_usd is not None:  # (11)
        model.add((tco if targets.budget_covers == "tco" else capex + rent) <= targets.budget_usd, "budget")
    # --- objective and solve ---------------------------------------------------------------
    maximize = targets.objective == "min_time"
    model.set_objective({"min_time": throughput, "min_power": power}.get(targets.objective, tco), maximize)
    status, objective, bound = model.solve(time_limit_s, mip_gap)
    if status in (Status.INFEASIBLE, Status.NO_SOLUTION):
        return _empty(status, backend, start, model)
    gap = _gap(objective, bound) if bound is not None else (mip_gap if status == Status.OPTIMAL else None)
    tables = {"x": x, "dp": dp, "n": n, "G": G, "S": S, "L": L, "K": K, "OG": OG, "OS": OS}

    def snapshot() -> dict[tuple[str, str], float]:
        return {(name, k): model.value(v) for name, t in tables.items() for k, v in t.items()}

    values = snapshot()
    if tie_break and objective is not None:
        remaining = max(1.0, time_limit_s - (time.perf_counter() - start))
        slack = 1e-7 * max(1.0, abs(objective))
        if maximize:
            model.add(throughput >= objective - slack, "tie_break_throughput")
            model.set_objective(tco, False)
        elif targets.objective == "min_power":
            model.add(power <= objective + slack, "tie_break_power")
            model.set_objective(tco, False)
        else:
            model.add(tco <= objective + slack, "tie_break_cost")
            model.set_objective(throughput if table.candidates else capacity, True)
        second, _, _ = model.solve(remaining, mip_gap)
        if second == Status.OPTIMAL:  # a pass stopped by the clock is discarded: keeps output deterministic
            values = snapshot()
    chosen = [c for c in table.candidates if values["x", c.key] > 0.5]
    trained = {c.workload for c in table.candidates}
    if sorted(c.workload for c in chosen) != sorted(trained):
        raise SolverError(f"the solver selected {len(chosen)} training plans; expected one for each of "
                          f"{len(trained)} training workload(s)")
    plans = tuple((p, round(values["dp", p.key])) for p in chosen)
    first: Candidate | None
    first, dp_value = plans[0] if plans else (None, 0)
    replicas = tuple((r, round(values["n", r.key])) for r in table.serving if round(values["n", r.key]) > 0)
    for h, g in table.groups.items():  # a rented group's instances cost nothing apart from its GPUs
        if g.rented:
            values["S", h] = math.ceil(round(values["G", h]) / g.slots)
    purchases = tuple(GroupCount(h, round(values["G", h]), round(values["S", h]),
                                 round(values.get(("L", h), 0.0)), round(values.get(("K", h), 0.0)),
                                 round(values.get(("OG", h), 0.0)), round(values.get(("OS", h), 0.0)))
                      for h in sorted(table.groups) if round(values["G", h]) > 0)
    costs = solution_costs(table, targets, purchases, tuple(chosen))
    return MilpSolution(status, backend, objective, bound, gap, first, dp_value, replicas, purchases,
                        first.replica_tokens_per_s * dp_value if first else 0.0, costs.capex, costs.power_w,
                        costs.opex(targets), time.perf_counter() - start, model.n_vars, model.n_cons, costs,
                        plans)


def _gap(objective: float | None, bound: float | None) -> float | None:
    if objective is None or bound is None:
        return None
    return abs(bound - objective) / max(1e-9, abs(objective))


def _empty(status: Status, backend: str, start: float, model: _Model) -> MilpSolution:
    import time

    return MilpSolution(status, backend, None, None, None, None, 0, (), (), 0.0, 0.0, 0.0, 0.0,
                        time.perf_counter() - start, model.n_vars, model.n_cons)
