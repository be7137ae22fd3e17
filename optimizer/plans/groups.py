"""Hardware groups: a GPU in a server type, alone or on a fabric, bought, owned or rented, with
its prices, powers and fabric sizing; which GPUs the site's licence and limits allow, and why."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TypedDict

from optimizer.catalog import HOURS_PER_YEAR, Catalog, Gpu, Server
from optimizer.perf.goodput import Reliability
from optimizer.problem import Problem
from optimizer.problem.enums import BudgetCovers, Role
from optimizer.problem.procurement import Owned


@dataclass(frozen=True)
class Group:
    """One hardware choice: a GPU in a server type, on a fabric (None: a single server)."""

    gpu: str
    server: str
    fabric: str | None
    slots: int
    full_only: bool
    gpu_usd: float
    server_usd: float
    gpu_w: float
    server_w: float
    ports_per_server: int  # switch ports each server uses (0 without fabric)
    port_usd: float  # NIC cost per port (incl. cable where the catalog says so)
    port_w: float
    switch_ports: int
    switch_usd: float
    switch_w: float

    role: Role = Role.TRAIN  # train: on a fabric or one server; serve: independent replicas
    rack_units: int = 0  # height of one server
    # Owned inventory this group may draw on (shared with the other groups of the same pool)
    owned_gpus: int = 0
    owned_servers: int = 0
    owned_nics: bool = False  # the owned servers already carry this fabric's NICs
    pool: str | None = None
    # Rented from a cloud offer: no capex, no site power; billed per GPU-hour
    offer: str | None = None
    rent_usd_per_gpu_h: float = 0.0
    rent_hours: float = 0.0  # hours billed per rented GPU (0: a training job's own GPU-hours, on demand)
    rent_term_h: float = 0.0  # hours of one committed term (0: on demand or spot)
    rent_step: int = 0  # GPUs per rented instance
    rent_min_gpus: int = 0  # the fewest GPUs the offer rents (a training plan on it uses at least these)
    interruptible: bool = False  # spot capacity: the provider may reclaim it (training restarts more often)
    buy_cap: int | None = None  # most GPUs bought (or rented) beyond the owned ones; None: no cap
    owned_only: bool = False  # a chassis the site takes no more of (a tower in a data centre): owned parts only
    # Fabric sizing, constraint (6): the links (cable and transceivers) and a leaf's port split
    cable_usd: float = 0.0  # one server-port link, server to leaf
    cable_w: float = 0.0
    uplink_usd: float = 0.0  # one leaf-to-spine link
    uplink_w: float = 0.0
    leaf_down: int = 0  # leaf ports facing servers in a two-tier fabric
    leaf_up: int = 0  # leaf ports facing spines (leaf_down / leaf_up ≈ the oversubscription)
    workload: str = ""  # with several workloads, rentals are billed to the one workload that rents

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))  # the role may be given by its name ("serve")

    @property
    def key(self) -> str:
        if self.offer is not None:
            return (f"{self.gpu}/rent:{self.offer}" + ("/replicas" if self.role is Role.SERVE else "")
                    + (f"@{self.workload}" if self.workload else ""))
        if self.fabric is not None:
            return f"{self.gpu}/{self.server}/{self.fabric}"
        return f"{self.gpu}/{self.server}/{'single-node' if self.role is Role.TRAIN else 'replicas'}"

    @property
    def rented(self) -> bool:
        return self.offer is not None

    def reliability(self, r: Reliability) -> Reliability:
        """What interrupts a training job on this group: spot capacity adds its provider's reclaims."""
        return r.on_spot() if self.interruptible else r

    @property
    def first_gpus(self) -> int:
        """The fewest GPUs one can get: a full baseboard, a rented instance, or one card."""
        if self.rented:
            return self.rent_step
        return self.slots if self.full_only else 1

    @property
    def min_capex(self) -> float:
        """Capex plus capacity rent of the smallest purchase (owned parts are free)."""
        if self.rented:
            return self.first_gpus * self.rent_usd_per_gpu_h * self.rent_hours
        gpus = max(0, self.first_gpus - self.owned_gpus)
        return gpus * self.gpu_usd + (0.0 if self.owned_servers else self.server_usd)

    @property
    def min_power_w(self) -> float:
        if self.rented:
            return 0.0
        return self.first_gpus * self.gpu_w + self.server_w

    @property
    def server_power_w(self) -> float:
        """One full server's IT power (what a rack must take)."""
        return self.slots * self.gpu_w + self.server_w + self.ports_per_server * (self.port_w + self.cable_w)

    def per_rack(self, rack_w: float, rack_units: int) -> int:
        """Servers of this group one rack takes: whole servers, by its power and by its height (a
        server is not split across racks, so four 20 kW racks take two 7 kW servers each, not 11)."""
        by_power = int(rack_w // self.server_power_w) if self.server_power_w > 0 else 10**6
        by_height = rack_units // self.rack_units if self.rack_units else 10**6
        return max(1, min(by_power, by_height))

    @property
    def oversubscription(self) -> float:
        return self.leaf_down / self.leaf_up if self.leaf_up else 1.0

    def spans_leaves(self, servers: int) -> bool:
        """True when ``servers`` need more ports than one switch has (a two-tier fabric)."""
        return self.fabric is not None and self.ports_per_server * servers > self.switch_ports


def leaf_split(switch_ports: int, oversubscription: float) -> tuple[int, int]:
    """(down, up) ports of a leaf switch: the most server-facing ports d with d + ⌈d / o⌉ ≤ P, so
    that downlinks are at most o times the ⌈d / o⌉ uplinks (o = 1: a non-blocking fat tree, d = P/2)."""
    down = int(switch_ports * oversubscription / (1 + oversubscription)) + 1
    while down + math.ceil(down / oversubscription - 1e-9) > switch_ports:
        down -= 1
    return down, math.ceil(down / oversubscription - 1e-9)


def build_groups(problem: Problem, catalog: Catalog, gpu_id: str, role: Role = Role.TRAIN) -> list[Group]:
    """The hardware groups a GPU can be had in: bought or owned in each server type that takes it,
    alone or (for training) on each fabric the server supports, where the site's licence allows;
    and rented from each cloud offer the problem allows. Serving replicas need no fabric."""
    groups = _rented_groups(problem, catalog, gpu_id, role)
    if licence_reason(problem, catalog, gpu_id) is None:
        groups = _site_groups(problem, catalog, gpu_id, role) + groups
    return groups


def _owned(problem: Problem, gpu_id: str, server_id: str) -> Owned | None:
    """The inventory line a group of this GPU in this server draws on: cards already in such
    servers, else loose cards of the GPU (which any server that takes them can hold)."""
    lines = [o for o in problem.inventory if o.gpu == gpu_id]
    return next((o for o in lines if o.server == server_id), None) or next((o for o in lines if o.server is None), None)


def _site_groups(problem: Problem, catalog: Catalog, gpu_id: str, role: Role) -> list[Group]:
    groups: list[Group] = []
    gpu = catalog.gpus[gpu_id]
    for server in catalog.servers_for(gpu_id):
        if server.id in problem.exclude_servers:
            continue
        owned = _owned(problem, gpu_id, server.id)
        if owned is None and not problem.may_buy(gpu_id):
            continue
        # towers and consumer rigs: not in a data centre unless the problem allows them; owned ones
        # already there stay usable, but nothing more is bought into them
        tower_barred = server.workstation and not problem.allow_workstations
        if tower_barred and owned is None:
            continue
        fabrics: list[str | None] = [None]
        if role is Role.TRAIN:
            fabrics += [f for f in server.fabrics if f not in problem.exclude_fabrics]
        for fid in fabrics:
            network: _FabricFields = _fabric_fields(catalog, fid, problem.oversubscription) if fid is not None else {}
            groups.append(replace(
                bare_group(gpu_id, server, fid, role, gpu_usd=gpu.price.usd, server_usd=server.price.usd,
                           gpu_w=gpu.tdp_w, server_w=server.base_power_w),
                owned_gpus=owned.count if owned else 0, owned_servers=owned.servers if owned else 0,
                owned_nics=bool(owned and fid is not None and owned.fabric == fid),
                pool=owned.pool if owned else None, buy_cap=problem.buy_cap(gpu_id), owned_only=tower_barred,
                **network))
    return groups


def bare_group(gpu: str, server: Server, fabric: str | None, role: Role, full_only: bool | None = None,
               gpu_usd: float = 0.0, server_usd: float = 0.0, gpu_w: float = 0.0, server_w: float = 0.0) -> Group:
    """A group of ``gpu`` in ``server`` on ``fabric`` with its prices and powers, before the fabric's
    parts (``_fabric_fields``), owned inventory or a rental are set on it (a rental has no capex and
    no site power: 0)."""
    return Group(gpu=gpu, server=server.id, fabric=fabric, slots=server.slots,
                 full_only=server.full_only if full_only is None else full_only, gpu_usd=gpu_usd,
                 server_usd=server_usd, gpu_w=gpu_w, server_w=server_w, ports_per_server=0, port_usd=0.0,
                 port_w=0.0, switch_ports=0, switch_usd=0.0, switch_w=0.0, role=role, rack_units=server.rack_units)


class _FabricFields(TypedDict, total=False):
    """The Group fields a fabric sets."""

    ports_per_server: int
    port_usd: float
    port_w: float
    switch_ports: int
    switch_usd: float
    switch_w: float
    leaf_down: int
    leaf_up: int
    cable_usd: float
    cable_w: float
    uplink_usd: float
    uplink_w: float


def _fabric_fields(catalog: Catalog, fabric_id: str, oversubscription: float) -> _FabricFields:
    """A fabric's per-port and per-switch figures, as Group fields."""
    fabric = catalog.fabrics[fabric_id]
    ports, _ = catalog.fabric_ports(fabric)
    out: _FabricFields = {"ports_per_server": int(ports)}
    if fabric.nic is not None:
        nic = catalog.nics[fabric.nic]
        out["port_usd"], out["port_w"] = nic.price.usd / nic.ports, nic.power_w / nic.ports
    switch = catalog.switches[fabric.switch]
    down, up = leaf_split(switch.ports, oversubscription)
    out["switch_ports"], out["switch_usd"], out["switch_w"] = switch.ports, switch.price.usd, switch.power_w
    out["leaf_down"], out["leaf_up"] = down, up
    if fabric.server_cable is not None:  # one per server port
        cable = catalog.cables[fabric.server_cable]
        out["cable_usd"], out["cable_w"] = cable.price.usd, cable.power_w
    if fabric.switch_cable is not None:  # one per leaf uplink
        uplink = catalog.cables[fabric.switch_cable]
        out["uplink_usd"], out["uplink_w"] = uplink.price.usd, uplink.power_w
    return out


def rent_hours(problem: Problem, term_hours: float, role: Role) -> float:
    """Hours billed per rented GPU: the horizon for serving on demand; whole committed terms
    covering the horizon (serving) or the deadline (training); 0 for training on demand, which
    pays its own GPU-hours."""
    horizon = problem.horizon_years * HOURS_PER_YEAR
    if term_hours == 0:
        return horizon if role is Role.SERVE else 0.0
    deadline = problem.training.deadline_s if problem.training else None
    period = horizon if role is Role.SERVE else (deadline / 3600 if deadline else term_hours)
    return term_hours * max(1, math.ceil(period / term_hours - 1e-9))


def _rented_groups(problem: Problem, catalog: Catalog, gpu_id: str, role: Role) -> list[Group]:
    groups = []
    for oid in problem.offers:
        offer = catalog.offers[oid]
        by_instance = (offer.min_gpus or 0) <= offer.gpus_per_instance
        if offer.gpu != gpu_id or (role is Role.SERVE and (offer.interruptible or not by_instance)):
            continue  # serving rents capacity that stays, by the instance
        server = catalog.servers[offer.server]
        fabric = offer.fabric if role is Role.TRAIN else None
        whole = offer.gpus_per_instance == server.slots  # rented by the whole server
        groups.append(replace(bare_group(gpu_id, server, fabric, role, full_only=whole),
                              offer=oid, rent_usd_per_gpu_h=offer.price.usd,
                              rent_hours=rent_hours(problem, offer.term_hours, role), rent_term_h=offer.term_hours,
                              rent_step=offer.gpus_per_instance, buy_cap=offer.max_gpus,
                              rent_min_gpus=offer.min_gpus or 0, interruptible=offer.interruptible))
    return groups


def no_group_reason(problem: Problem, catalog: Catalog, gpu_id: str) -> str:
    """Why a GPU has no hardware group at all: it may not be bought here, or no server takes it."""
    if not problem.may_buy(gpu_id) and not any(o.gpu == gpu_id for o in problem.inventory):
        if gpu_id in problem.end_of_life:
            return end_of_life_reason(catalog, gpu_id)
        if problem.region is not None and problem.buy_gpus:
            region = catalog.regions[problem.region]
            return (f"export rules: region '{region.id}' allows only {', '.join(region.allowed_gpus)} "
                    f"({region.date})")
        return "not bought (procurement.buy is false), not owned and no cloud offer rents it"
    takers = [sv for sv in catalog.servers_for(gpu_id) if sv.id not in problem.exclude_servers]
    if takers and all(sv.workstation for sv in takers) and not problem.allow_workstations:
        return (f"only workstation towers or consumer rigs take it ({', '.join(sv.id for sv in takers)}), and this "
                "data centre does not (site.allow_workstations: true allows them)")
    return "no server in the catalog (or allowed by the problem) takes it"


def end_of_life_reason(catalog: Catalog, gpu_id: str) -> str:
    """Why a GPU no longer sold new is not bought, and the switch that buys it used."""
    used = catalog.gpus[gpu_id].used_price
    if used is None:
        return "end of life: no longer sold new, and the catalog has no used-market price for it"
    return (f"end of life: no longer sold new; hardware.allow_used: true buys it used "
            f"(${used.usd:,.0f}, {used.date})")


LICENCE_REASON = "licence: the GeForce driver EULA forbids data-centre deployment"


def licence_reason(problem: Problem, catalog: Catalog, gpu_id: str) -> str | None:
    """Why a GPU may not be used at this site, or None."""
    if problem.datacenter and not catalog.gpus[gpu_id].datacenter_license:
        return LICENCE_REASON
    return None


def licensed_gpus(problem: Problem, catalog: Catalog, dropped: Counter[str],
                  gpu_reasons: dict[str, str]) -> Iterator[tuple[str, Gpu]]:
    """The problem's GPUs the site may deploy (or rent), recording the licence reason for the others."""
    rentable = {catalog.offers[o].gpu for o in problem.offers}
    for gpu_id in problem.gpus:
        reason = licence_reason(problem, catalog, gpu_id)
        if reason is None or gpu_id in rentable:
            yield gpu_id, catalog.gpus[gpu_id]
        else:
            gpu_reasons[gpu_id] = reason
            dropped["licence"] += 1


def max_gpus(problem: Problem, g: Group) -> int:
    """Most GPUs of this group any feasible answer can use.

    Beyond the owned ones, n GPUs cost at least n·(GPU + server/slots) (or n·rate·hours rented)
    and draw at least n·(GPU + server/slots) watts on site, so the budget (capex + rent ≤ TCO),
    the availability cap and the power cap bound n; a valid bound keeps pruning exact.
    """
    return max(min(gpu_limits(problem, g).values()), 0)


def gpu_limits(problem: Problem, g: Group) -> dict[str, int]:
    """Each limit on the GPUs of this group, by name (``max_gpus`` is the least of them)."""
    out = {"hardware.max_gpus": problem.max_gpus}
    if g.buy_cap is not None:
        cap = (f"the largest rental of {g.offer}" if g.rented else
               "hardware.max_units" if g.buy_cap else "the owned GPUs (none may be bought)")
        out[cap] = g.owned_gpus + g.buy_cap
    if problem.budget_usd is not None:
        unit = g.rent_usd_per_gpu_h * g.rent_hours if g.rented else g.gpu_usd + g.server_usd / g.slots
        if unit > 0:
            out["budget"] = g.owned_gpus + int(problem.budget_usd // unit)
    if problem.power_cap_w is not None and not g.rented:
        out["power cap"] = int(problem.power_cap_w // (g.gpu_w + g.server_w / g.slots))
    return out


def group_affordable(problem: Problem, g: Group) -> bool:
    if problem.power_cap_w is not None and g.min_power_w > problem.power_cap_w:
        return False
    if problem.racks is not None and not g.rented and g.server_power_w > problem.racks.kw:
        return False
    return not (problem.budget_usd is not None and problem.budget_covers is BudgetCovers.CAPEX
                and g.min_capex > problem.budget_usd)


def group_reason(problem: Problem, g: Group) -> str:
    if problem.racks is not None and not g.rented and g.server_power_w > problem.racks.kw:
        return (f"racks: one {g.server} server draws {g.server_power_w / 1e3:,.1f} kW, a rack takes "
                f"{problem.racks.kw / 1e3:,.1f} kW. To fix: site.racks.cooling: liquid or a higher kw_per_rack")
    if problem.power_cap_w is not None and g.min_power_w > problem.power_cap_w:
        return f"power: one {g.server} server needs {g.min_power_w / 1e3:,.1f} kW, {problem.power_cap_text}"
    return f"budget: the smallest purchase ({g.server}) costs ${g.min_capex:,.0f}, budget ${problem.budget_usd:,.0f}"

