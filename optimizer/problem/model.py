"""The validated problem in SI units and catalog ids: ``Problem``, its request classes
(``Demand``) and, with several workloads, their time windows (``Phase``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from optimizer.catalog import Catalog
from optimizer.perf.goodput import Reliability
from optimizer.perf.specs import ModelSpec, Precision
from optimizer.problem.enums import BudgetCovers, Objective
from optimizer.problem.procurement import (
    Owned,
    PriceOverride,
    RackLimits,
)
from optimizer.problem.schema import (
    Search,
    SolverOptions,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack



@dataclass(frozen=True)
class Demand:
    """A request class in SI units: output tokens/s to sustain, latency limits in seconds."""

    name: str
    input_len: int
    output_len: int
    output_tokens_per_s: float
    ttft_s: float | None
    tpot_s: float | None


@dataclass(frozen=True)
class Phase:
    """One workload of a problem with several, in its time window (seconds from the horizon's
    start). ``problem`` is that workload alone, with the shared site, hardware and prices; its
    deadline (training) or horizon (serving) is the window's length."""

    name: str
    kind: str  # train | serve
    problem: Problem
    start_s: float
    end_s: float


class Limits(TypedDict, total=False):
    """The shared limits ``Problem.with_limits`` changes (None: no limit)."""

    budget_usd: float | None
    power_cap_w: float | None


@dataclass(frozen=True)
class Problem:
    """A validated problem, in SI units and catalog ids."""

    name: str
    path: Path
    description: str
    model: ModelSpec
    model_id: str
    tokens: float  # training tokens (0 for serving)
    precision: Precision  # training precision
    seq_len: int
    min_global_batch: int  # sequences per step
    max_global_batch: int
    objective: Objective  # min_cost or min_time (min_power only in a repair's relaxed targets)
    deadline_s: float | None
    budget_usd: float | None
    budget_covers: BudgetCovers
    datacenter: bool
    power_cap_w: float | None
    electricity_usd_per_kwh: float
    pue: float
    horizon_years: float
    load_factor: float
    gpus: tuple[str, ...]  # allowed after allow/exclude lists (licence is applied in plans)
    exclude_servers: tuple[str, ...]
    exclude_fabrics: tuple[str, ...]
    max_gpus: int
    search: Search
    solver: SolverOptions
    kind: str = "train"
    demands: tuple[Demand, ...] = ()
    serve_precisions: tuple[str, ...] = ()
    kv_precision: str = "fp16"
    stack: str | None = None  # training stack or serving engine (catalogs/stacks.yaml); None: vendor default
    confidence: int | None = None  # plan so targets hold with this probability (percent)
    buy_gpus: tuple[str, ...] | None = None  # GPUs that may be bought (None: all of ``gpus``)
    inventory: tuple[Owned, ...] = ()
    offers: tuple[str, ...] = ()  # cloud offers that may be rented
    max_units: tuple[tuple[str, int], ...] = ()  # (GPU or server id, most units bought)
    allow_workstations: bool = True  # towers, desktops and consumer rigs may be chosen (not in a data centre)
    maintenance_per_year: float = 0.0
    colocation_usd_per_kw_month: float = 0.0
    installation_usd_per_server: float = 0.0
    racks: RackLimits | None = None
    prices: tuple[PriceOverride, ...] = ()
    region: str | None = None
    oversubscription: float = 1.0  # leaf downlinks per uplink in a two-tier fabric
    memory_headroom: float = 0.0  # share of each GPU's memory a training plan leaves free
    reliability: Reliability = Reliability()  # failures and recovery of a training job (default: none)
    phases: tuple[Phase, ...] = ()  # several workloads (kind "multi"), each a problem of its own
    # the catalog at this problem's prices, as ``with_prices`` resolved it (None: not yet priced)
    catalog: Catalog | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # the closed sets may be given by their names (``objective="min_time"``)
        object.__setattr__(self, "objective", Objective(self.objective))
        object.__setattr__(self, "budget_covers", BudgetCovers(self.budget_covers))

    def may_buy(self, gpu: str) -> bool:
        return gpu in (self.buy_gpus if self.buy_gpus is not None else self.gpus)

    def buy_cap(self, item: str) -> int | None:
        """Most units of a GPU or server the problem may buy (None: no cap)."""
        if item in self.gpus and not self.may_buy(item):
            return 0
        return dict(self.max_units).get(item)

    def with_limits(self, **fields: Unpack[Limits]) -> Problem:
        """The problem with shared limits (budget_usd, power_cap_w) changed, in every workload too."""
        phases = tuple(replace(ph, problem=replace(ph.problem, **fields)) for ph in self.phases)
        return replace(self, phases=phases, **fields)

    @property
    def total_demand(self) -> float:
        return sum(d.output_tokens_per_s for d in self.demands)
