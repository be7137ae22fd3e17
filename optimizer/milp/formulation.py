"""The mixed-integer program, written once for both backends: one ``add_*`` function per numbered
constraint below, called by ``optimizer.milp.solve`` in this order.

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

import math
from dataclasses import dataclass, field
from typing import Any

from optimizer.milp.backends import Model
from optimizer.milp.costs import Targets, job_gpu_hours
from optimizer.plans import Candidate, Group, PlanTable, ServeCandidate
from optimizer.problem.enums import BudgetCovers


@dataclass
class Variables:
    """The decision variables, by candidate or group key (a group has L, K, Y, E only with a fabric
    it builds, OG and OS only with owned parts)."""

    x: dict[str, Any]
    dp: dict[str, Any]
    n: dict[str, Any]
    G: dict[str, Any] = field(default_factory=dict)
    S: dict[str, Any] = field(default_factory=dict)
    L: dict[str, Any] = field(default_factory=dict)
    K: dict[str, Any] = field(default_factory=dict)
    Y: dict[str, Any] = field(default_factory=dict)
    E: dict[str, Any] = field(default_factory=dict)
    OG: dict[str, Any] = field(default_factory=dict)
    OS: dict[str, Any] = field(default_factory=dict)

    def read_back(self) -> dict[str, dict[str, Any]]:
        """The families the solution is read from."""
        return {"x": self.x, "dp": self.dp, "n": self.n, "G": self.G, "S": self.S, "L": self.L, "K": self.K,
                "OG": self.OG, "OS": self.OS}


@dataclass
class Terms:
    """Linear terms gathered group by group for (9) capex, the maintained value, (10) power, (14)
    rent, (16) rack units and (15) the units that count against each cap."""

    capex: list[Any] = field(default_factory=list)
    value: list[Any] = field(default_factory=list)
    power: list[Any] = field(default_factory=list)
    rent: list[Any] = field(default_factory=list)
    units: list[Any] = field(default_factory=list)
    servers: list[tuple[Group, Any]] = field(default_factory=list)  # on-site servers, for packing into racks
    caps: dict[tuple[str, str], list[Any]] = field(default_factory=dict)  # (kind, id) -> units bought or rented


def replica_bound(r: ServeCandidate, targets: Targets) -> int:
    """More than ⌈D_k / rate⌉ replicas of one type is never needed (one type alone covers D_k)."""
    demand = dict(targets.demands).get(r.demand, 0.0)
    return max(0, math.ceil(demand / r.tokens_per_s - 1e-9))


def group_bounds(table: PlanTable, targets: Targets) -> dict[str, tuple[int, int]]:
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


def variables(model: Model, table: PlanTable, targets: Targets, bounds: dict[str, tuple[int, int]]) -> Variables:
    """x_c, dp_c, n_r, and per group G_h, S_h (L_h, K_h, y_h, E_h with a fabric; OG_h, OS_h owned)."""
    v = Variables(x={c.key: model.bool_var(f"x[{c.key}]") for c in table.candidates},
                  dp={c.key: model.int_var(0, c.dp_max, f"dp[{c.key}]") for c in table.candidates},
                  n={r.key: model.int_var(0, replica_bound(r, targets), f"replicas[{r.key}]") for r in table.serving})
    for h, g in sorted(table.groups.items()):
        gmax, smax = bounds[h]
        v.G[h] = model.int_var(0, gmax, f"gpus[{h}]")
        v.S[h] = model.int_var(0, smax, f"servers[{h}]")
        if g.fabric is not None and not g.rented:
            lmax = _leaf_bound(g, smax)
            v.L[h] = model.int_var(0, lmax, f"leaf[{h}]")
            v.K[h] = model.int_var(0, lmax, f"spine[{h}]")
            v.Y[h] = model.bool_var(f"multi_switch[{h}]")
            v.E[h] = model.int_var(0, lmax * g.leaf_up, f"uplinks[{h}]")
        if g.pool is not None:
            v.OG[h] = model.int_var(0, min(g.owned_gpus, gmax), f"owned_gpus[{h}]")
            v.OS[h] = model.int_var(0, min(g.owned_servers, smax), f"owned_servers[{h}]")
    return v


def add_one_plan(model: Model, table: PlanTable, v: Variables) -> None:
    """(1) one plan per training workload."""
    for w in sorted({c.workload for c in table.candidates}):
        model.add(model.total([v.x[c.key] for c in table.candidates if c.workload == w]) == 1,
                  f"one_plan[{w}]" if w else "one_plan")


def add_dp_range(model: Model, table: PlanTable, v: Variables) -> None:
    """(2) dp only for the chosen plan, within its range."""
    for c in table.candidates:
        model.add(v.dp[c.key] >= c.dp_min * v.x[c.key], f"dp_min[{c.key}]")
        model.add(v.dp[c.key] <= c.dp_max * v.x[c.key], f"dp_max[{c.key}]")


def add_gpu_count(model: Model, h: str, g: Group, used: dict[str, list[Any]], targets: Targets,
                  v: Variables) -> None:
    """(3) enough GPUs for the workloads that run at the same time, for each such set; (3r) a
    rented group's GPUs are exactly those used, since they are billed."""
    work = list(used)
    if g.rented:
        model.add(v.G[h] == model.total([u for w in work for u in used[w]]), f"gpus[{h}]")
        return
    for i, running in enumerate(targets.overlaps or (tuple(work),)):
        model.add(v.G[h] >= model.total([u for w in running for u in used.get(w, [])]),
                  f"gpus[{h}]" + (f"[{i}]" if targets.overlaps else ""))


def add_servers(model: Model, h: str, g: Group, v: Variables) -> None:
    """(4) servers to hold the GPUs (exactly full for baseboards sold full)."""
    if g.full_only:
        model.add(v.G[h] == g.slots * v.S[h], f"full_servers[{h}]")
    else:
        model.add(v.G[h] <= g.slots * v.S[h], f"slots[{h}]")


def add_owned(model: Model, h: str, g: Group, v: Variables) -> tuple[Any, Any]:
    """(13) owned parts are used first (they cost nothing to buy); returns the GPUs and servers
    bought. A chassis the site takes no more of gets nothing bought into it."""
    if g.pool is None:
        return v.G[h], v.S[h]
    model.add(v.OG[h] <= v.G[h], f"owned_gpus_used[{h}]")
    model.add(v.OS[h] <= v.S[h], f"owned_servers_used[{h}]")
    if g.owned_only:
        model.add(v.G[h] <= v.OG[h], f"owned_only_gpus[{h}]")
        model.add(v.S[h] <= v.OS[h], f"owned_only_servers[{h}]")
    return v.G[h] - v.OG[h], v.S[h] - v.OS[h]


def add_rent(h: str, g: Group, cands: list[Candidate], jobs: dict[str, tuple[float, float | None]], targets: Targets,
             v: Variables, terms: Terms) -> None:
    """(14) capacity rented for its hours; on demand, a training job's GPU-hours (not dp's)."""
    terms.caps.setdefault(("offer", g.offer or ""), []).append(v.G[h])
    if g.rent_hours > 0:
        terms.rent.append(g.rent_usd_per_gpu_h * g.rent_hours * v.G[h])
    else:
        terms.rent.extend(g.rent_usd_per_gpu_h * job_gpu_hours(c, jobs.get(c.workload, (targets.tokens,))[0])
                          * v.x[c.key] for c in cands)


def add_fabric(model: Model, h: str, g: Group, cands: list[Candidate], smax: int, v: Variables) -> tuple[Any, Any]:
    """(6) one switch, or a two-tier fat tree; returns the switches and leaf-spine links."""
    if g.fabric is None:
        return 0, 0
    q, P, d, u = g.ports_per_server, g.switch_ports, g.leaf_down, g.leaf_up
    lmax = _leaf_bound(g, smax)  # L's upper bound: the M that switches the two-tier rows off
    L, K, Y, E, S = v.L[h], v.K[h], v.Y[h], v.E[h], v.S[h]
    model.add(q * S <= L * P, f"leaf_ports[{h}]")
    spanning = [v.x[c.key] for c in cands if c.gpus_per_replica * c.dp_min > g.slots]
    # at most one plan per workload: a spanning plan of any workload needs a switch (L ≥ 1)
    jobs_spanning = len({c.workload for c in cands if c.gpus_per_replica * c.dp_min > g.slots})
    model.add(max(1, jobs_spanning) * L >= model.total(spanning), f"leaf_needed[{h}]")
    model.add(q * S <= P + q * smax * Y, f"one_switch[{h}]")
    model.add((q / d) * S - lmax * (1 - Y) <= L, f"fat_tree_leaf[{h}]")
    model.add(u * L - u * lmax * (1 - Y) <= P * K, f"fat_tree_spine[{h}]")
    model.add(u * L - u * lmax * (1 - Y) <= E, f"fat_tree_uplinks[{h}]")
    return L + K, E


def group_terms(h: str, g: Group, bought: tuple[Any, Any], fabric: tuple[Any, Any], targets: Targets,
                v: Variables, terms: Terms) -> None:
    """A bought or owned group's share of (9) capex, the maintained value, (10) power and (16) units."""
    bought_g, bought_s = bought
    switches, uplinks = fabric
    S = v.S[h]
    port_usd = g.ports_per_server * (g.port_usd + g.cable_usd)
    terms.capex += [g.gpu_usd * bought_g, (g.server_usd + targets.install_usd_per_server) * bought_s,
                    port_usd * (bought_s if g.owned_nics else S), g.switch_usd * switches, g.uplink_usd * uplinks]
    terms.value += [g.gpu_usd * v.G[h], (g.server_usd + port_usd) * S, g.switch_usd * switches,
                    g.uplink_usd * uplinks]
    terms.power += [g.gpu_w * v.G[h], (g.server_w + g.ports_per_server * (g.port_w + g.cable_w)) * S,
                    g.switch_w * switches, g.uplink_w * uplinks]
    terms.units += [g.rack_units * S, switches]
    terms.servers.append((g, S))


def add_groups(model: Model, table: PlanTable, targets: Targets, bounds: dict[str, tuple[int, int]],
               v: Variables) -> Terms:
    """(3), (4), (13), (14) and (6) group by group, gathering the cost, power and cap terms."""
    by_group: dict[str, list[Candidate]] = {}
    for c in table.candidates:
        by_group.setdefault(c.group, []).append(c)
    replicas_on: dict[str, list[ServeCandidate]] = {}
    for r in table.serving:
        replicas_on.setdefault(r.group, []).append(r)
    jobs = {w: (tokens, seconds) for w, tokens, seconds in targets.training_jobs()}
    work = sorted({c.workload for c in table.candidates} | {r.workload for r in table.serving})
    terms = Terms()
    for h, g in sorted(table.groups.items()):
        cands = by_group.get(h, [])
        used = {w: ([c.gpus_per_replica * v.dp[c.key] for c in cands if c.workload == w]
                    + [r.gpus_per_replica * v.n[r.key] for r in replicas_on.get(h, []) if r.workload == w])
                for w in work}
        add_gpu_count(model, h, g, used, targets, v)
        add_servers(model, h, g, v)
        bought = add_owned(model, h, g, v)
        if g.rented:
            add_rent(h, g, cands, jobs, targets, v, terms)
            continue
        terms.caps.setdefault(("gpu", g.gpu), []).append(bought[0])
        terms.caps.setdefault(("server", g.server), []).append(bought[1])
        fabric = add_fabric(model, h, g, cands, bounds[h][1], v)
        group_terms(h, g, bought, fabric, targets, v, terms)
    return terms


def add_pools(model: Model, table: PlanTable, v: Variables) -> None:
    """(13) groups that share one inventory take at most its GPUs and servers."""
    pools: dict[str, tuple[int, int, list[str]]] = {}
    for h, g in sorted(table.groups.items()):
        if g.pool is not None:
            pools.setdefault(g.pool, (g.owned_gpus, g.owned_servers, []))[2].append(h)
    for pool, (gpus, servers, members) in sorted(pools.items()):
        if len(members) > 1:
            model.add(model.total([v.OG[h] for h in members]) <= gpus, f"pool_gpus[{pool}]")
            model.add(model.total([v.OS[h] for h in members]) <= servers, f"pool_servers[{pool}]")


def add_caps(model: Model, table: PlanTable, targets: Targets, terms: Terms) -> None:
    """(15) availability: at most N units of a GPU or server bought, or of an offer rented."""
    limits = {("server", k): cap for k, cap in targets.server_caps}
    for g in table.groups.values():
        if g.buy_cap is not None:
            limits[("offer" if g.rented else "gpu", g.offer or g.gpu)] = g.buy_cap
    for key, cap in sorted(limits.items()):
        if key in terms.caps:
            model.add(model.total(terms.caps[key]) <= cap, f"cap[{key[0]}:{key[1]}]")


def add_racks(model: Model, table: PlanTable, targets: Targets, bounds: dict[str, tuple[int, int]],
              v: Variables, terms: Terms, power: Any) -> None:
    """(16) racks by power and by height; new racks are capex when the site has no rack count."""
    rk = targets.racks
    if rk is None:
        return
    most = rk.max_racks
    if most is None:  # enough racks for every group at its bounds, by power and by height
        watts = units = 0.0
        for h, g in table.groups.items():
            gmax, smax = bounds[h]
            switches = 2 * _leaf_bound(g, smax) if h in v.L else 0
            links = _leaf_bound(g, smax) * g.leaf_up if h in v.L else 0
            watts += (gmax * g.gpu_w + smax * (g.server_w + g.ports_per_server * (g.port_w + g.cable_w))
                      + switches * g.switch_w + links * g.uplink_w)
            units += smax * g.rack_units + switches
        most = math.ceil(watts / rk.kw) + math.ceil(units / rk.units) + 1
    R = model.int_var(0, most, "racks")
    model.add(R * rk.kw >= power, "rack_power")
    model.add(R * rk.units >= model.total(terms.units), "rack_units")
    # whole servers: a group whose rack takes k of its servers needs S/k racks (exact for one server
    # type; racks shared by several types are counted by these shares)
    model.add(model.total([S * (1.0 / g.per_rack(rk.kw, rk.units)) for g, S in terms.servers]) <= R,
              "rack_packing")
    if rk.count is None:
        terms.capex.append(rk.usd * R)


def add_demands(model: Model, table: PlanTable, targets: Targets, v: Variables) -> None:
    """(12) every request class served at its demand."""
    for k, demand in targets.demands:
        model.add(model.total([r.tokens_per_s * v.n[r.key] for r in table.serving if r.demand == k]) >= demand,
                  f"demand[{k}]")


def add_deadlines(model: Model, table: PlanTable, targets: Targets, v: Variables) -> None:
    """(8) each training workload by its deadline."""
    jobs = {w: (tokens, seconds) for w, tokens, seconds in targets.training_jobs()}
    for w, (tokens, seconds) in sorted(jobs.items()):
        if seconds and tokens and any(c.workload == w for c in table.candidates):
            rate = model.total([c.replica_tokens_per_s * v.dp[c.key] for c in table.candidates if c.workload == w])
            model.add(rate >= tokens / seconds, f"deadline[{w}]" if w else "deadline")


def add_power_cap(model: Model, targets: Targets, power: Any) -> None:
    """(10) the site's power cap."""
    if targets.power_cap_w is not None:
        model.add(power <= targets.power_cap_w, "power_cap")


def add_budget(model: Model, targets: Targets, capex_and_rent: Any, tco: Any) -> None:
    """(11) capex + rent (or the TCO, when the budget covers it) within the budget."""
    if targets.budget_usd is not None:
        spent = tco if targets.budget_covers is BudgetCovers.TCO else capex_and_rent
        model.add(spent <= targets.budget_usd, "budget")
