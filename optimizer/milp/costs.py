"""Closed-form costs of a purchase: what the MIP's sums must equal, computed without a solver.

The MIP (``optimizer.milp``) writes these as linear constraints; after every solve the chosen
hardware is priced again here, part by part (constraints (6), (9), (10), (13)-(16) of the MIP),
and the report's bill of materials and TCO table are built from the same functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from optimizer.plans import Candidate, Group, PlanTable
from optimizer.problem.enums import BudgetCovers, Objective
from optimizer.problem.procurement import RackLimits


@dataclass(frozen=True)
class Targets:
    """What the MIP must meet and what it optimises."""

    objective: Objective
    tokens: float
    deadline_s: float | None = None
    budget_usd: float | None = None
    budget_covers: BudgetCovers = BudgetCovers.CAPEX
    power_cap_w: float | None = None
    opex_usd_per_w: float = 0.0  # electricity (and colocation) over the horizon per watt of IT load
    demands: tuple[tuple[str, float], ...] = ()  # (request class, output tokens/s) for serving
    maintenance: float = 0.0  # fraction of the on-site hardware's catalog value paid over the horizon
    install_usd_per_server: float = 0.0  # per server bought
    racks: RackLimits | None = None  # None: racks are not modelled
    server_caps: tuple[tuple[str, int], ...] = ()  # server id -> most bought
    # Several workloads: (workload, training tokens, seconds it may take) per training workload,
    # and the sets of workloads that run at the same time. Empty: one workload, named "".
    jobs: tuple[tuple[str, float, float | None], ...] = ()
    overlaps: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        # the closed sets may be given by their names (``objective="min_cost"``)
        object.__setattr__(self, "objective", Objective(self.objective))
        object.__setattr__(self, "budget_covers", BudgetCovers(self.budget_covers))

    @property
    def required_tokens_per_s(self) -> float | None:
        return self.tokens / self.deadline_s if self.deadline_s and self.tokens else None

    def training_jobs(self) -> tuple[tuple[str, float, float | None], ...]:
        """(workload, tokens, seconds allowed) for every training workload."""
        return self.jobs or (("", self.tokens, self.deadline_s),)

    def job_tokens(self, workload: str) -> float:
        return next((t for w, t, _ in self.training_jobs() if w == workload), self.tokens)


@dataclass(frozen=True)
class GroupCount:
    group: str
    gpus: int
    servers: int
    leaf_switches: int
    spine_switches: int
    owned_gpus: int = 0  # of ``gpus``, already owned
    owned_servers: int = 0


@dataclass(frozen=True)
class Costs:
    """What a set of purchases costs, term by term (constraints (9)-(11) and the objective)."""

    capex: float  # hardware bought, installation and new racks
    value: float  # catalog value of all on-site hardware in use, owned too (what maintenance is on)
    power_w: float  # on-site IT power
    rent: float  # cloud rental over the horizon (or the training job)
    racks: int  # racks the on-site hardware fills (0 when racks are not modelled)
    new_racks: int

    def opex(self, targets: Targets) -> float:
        return targets.opex_usd_per_w * self.power_w + targets.maintenance * self.value


def network_switches(group: Group, servers: int) -> tuple[int, int]:
    """(leaf, spine) switches for ``servers`` on the group's fabric: constraint (6) in closed form.
    One switch while the ports fit; then leaves of d_h server ports each, and spines for their
    u_h uplinks each (a two-tier fat tree, non-blocking at oversubscription 1)."""
    if group.fabric is None or servers == 0:
        return 0, 0
    ports = group.ports_per_server * servers
    if ports <= group.switch_ports:
        return 1, 0
    leaves = math.ceil(ports / group.leaf_down)
    return leaves, math.ceil(leaves * group.leaf_up / group.switch_ports)


def fabric_links(group: Group, count: GroupCount) -> tuple[int, int]:
    """(server-to-leaf, leaf-to-spine) links of a purchase: one per server port, and every leaf's
    uplinks once there are spines."""
    if group.fabric is None or group.rented:
        return 0, 0
    return count.servers * group.ports_per_server, count.leaf_switches * group.leaf_up if count.spine_switches else 0


def capex_parts(group: Group, count: GroupCount, install_usd: float = 0.0) -> dict[str, float]:
    """Capex of one group's purchase by part: constraint (9). Owned GPUs and servers (and the NICs
    of owned servers that carry the fabric) cost nothing; rented groups cost no capex."""
    if group.rented:
        return {}
    bought_servers = count.servers - count.owned_servers
    nic_servers = bought_servers if group.owned_nics else count.servers  # owned servers come cabled
    _, uplinks = fabric_links(group, count)
    return {"gpus": (count.gpus - count.owned_gpus) * group.gpu_usd,
            "servers": bought_servers * group.server_usd,
            "installation": bought_servers * install_usd,
            "network": (nic_servers * group.ports_per_server * (group.port_usd + group.cable_usd)
                        + (count.leaf_switches + count.spine_switches) * group.switch_usd
                        + uplinks * group.uplink_usd)}


def group_costs(group: Group, count: GroupCount, install_usd: float = 0.0) -> tuple[float, float, float]:
    """(capex USD, catalog value USD, IT power W) of one group's hardware: constraints (9), (10).
    Owned GPUs and servers cost nothing to buy but count in value and power; rented ones in neither."""
    if group.rented:
        return 0.0, 0.0, 0.0
    switches = count.leaf_switches + count.spine_switches
    _, uplinks = fabric_links(group, count)
    port_usd = group.ports_per_server * (group.port_usd + group.cable_usd)
    value = (count.gpus * group.gpu_usd + count.servers * (group.server_usd + port_usd) + switches * group.switch_usd
             + uplinks * group.uplink_usd)
    power = (count.gpus * group.gpu_w
             + count.servers * (group.server_w + group.ports_per_server * (group.port_w + group.cable_w))
             + switches * group.switch_w + uplinks * group.uplink_w)
    return sum(capex_parts(group, count, install_usd).values()), value, power


def rent_cost(group: Group, gpus: int, tokens: float, plan: Candidate | None = None) -> float:
    """USD of renting ``gpus`` of a rented group: capacity billed for its hours, or (a training job
    on demand) the job's GPU-hours, tokens · TP·PP / (tokens/s per replica) / 3600 per GPU-hour."""
    if not group.rented:
        return 0.0
    if group.rent_hours > 0:
        return group.rent_usd_per_gpu_h * group.rent_hours * gpus
    if plan is None:
        return 0.0
    return group.rent_usd_per_gpu_h * job_gpu_hours(plan, tokens)


def job_gpu_hours(plan: Candidate, tokens: float) -> float:
    """GPU-hours of a training job: independent of dp, since GPUs and tokens/s both scale with it."""
    return tokens * plan.gpus_per_replica / plan.replica_tokens_per_s / 3600.0


def racks_needed(racks: RackLimits, groups: dict[str, Group], purchases: tuple[GroupCount, ...]) -> int:
    """Racks the on-site hardware fills: by power (kW per rack), by height (1U per switch) and by
    whole servers (``Group.per_rack``: a server is not split across racks)."""
    power = units = shares = 0.0
    for p in purchases:
        g = groups[p.group]
        if g.rented:
            continue
        power += group_costs(g, p)[2]
        units += g.rack_units * p.servers + p.leaf_switches + p.spine_switches
        shares += p.servers / g.per_rack(racks.kw, racks.units)
    return max(math.ceil(power / racks.kw - 1e-9), math.ceil(units / racks.units - 1e-9),
               math.ceil(shares - 1e-9), 0)


def solution_costs(table: PlanTable, targets: Targets, purchases: tuple[GroupCount, ...],
                   plans: Candidate | tuple[Candidate, ...] | None) -> Costs:
    """Every cost term of a set of purchases, in closed form (the re-check of the MIP's sums);
    ``plans`` are the training plans chosen (a rented group on demand bills their GPU-hours)."""
    jobs = (plans,) if isinstance(plans, Candidate) else (plans or ())
    capex = value = power = rent = 0.0
    for p in purchases:
        g = table.groups[p.group]
        c, v, w = group_costs(g, p, targets.install_usd_per_server)
        capex, value, power = capex + c, value + v, power + w
        if g.rented and g.rent_hours == 0:
            rent += sum(rent_cost(g, p.gpus, targets.job_tokens(j.workload), j) for j in jobs if j.group == g.key)
        else:
            rent += rent_cost(g, p.gpus, targets.tokens)
    racks = new_racks = 0
    if targets.racks is not None:
        racks = racks_needed(targets.racks, table.groups, purchases)
        new_racks = racks if targets.racks.count is None else 0
        capex += new_racks * targets.racks.usd
    return Costs(capex, value, power, rent, racks, new_racks)


def purchase(group: Group, used_gpus: int) -> GroupCount:
    """The least hardware that runs ``used_gpus`` on ``group`` (what the MIP's min-cost reaches),
    drawing on the group's owned GPUs and servers first."""
    servers = math.ceil(used_gpus / group.slots)
    gpus = servers * group.slots if group.full_only else used_gpus
    leaves, spines = (0, 0) if group.rented else network_switches(group, servers)
    return GroupCount(group.key, gpus, servers, leaves, spines, min(group.owned_gpus, gpus),
                      min(group.owned_servers, servers))


def least_purchases(table: PlanTable, used: dict[str, int]) -> tuple[GroupCount, ...]:
    """``purchase`` for every group used, with each inventory pool shared out: groups of one pool
    (for example loose cards that several server types can hold) together use at most what it has.
    Owned GPUs of a pool are all the same part, so which group takes them does not change the cost."""
    left: dict[str, list[int]] = {}
    out = []
    for h, gpus in sorted(used.items()):
        g = table.groups[h]
        need = purchase(g, gpus)
        if g.pool is not None:
            pool = left.setdefault(g.pool, [g.owned_gpus, g.owned_servers])
            owned_gpus, owned_servers = min(need.owned_gpus, pool[0]), min(need.owned_servers, pool[1])
            pool[0] -= owned_gpus
            pool[1] -= owned_servers
            need = replace(need, owned_gpus=owned_gpus, owned_servers=owned_servers)
        out.append(need)
    return tuple(out)
