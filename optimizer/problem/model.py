"""The validated problem in SI units and catalog ids: ``Problem``, the site, hardware and prices
its workloads share, and the workloads (``TrainWorkload``, ``ServeWorkload`` with its request
classes, ``Demand``), each in its time window when there are several."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict

from pydantic import ValidationError

from optimizer.catalog import Catalog
from optimizer.errors import ProblemError
from optimizer.perf.goodput import Reliability
from optimizer.perf.specs import ModelSpec, Precision
from optimizer.problem.enums import BudgetCovers, Objective
from optimizer.problem.procurement import (
    Owned,
    PriceOverride,
    RackLimits,
)
from optimizer.problem.schema import (
    MAX_TIME_LIMIT_S,
    MIN_TIME_LIMIT_S,
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
    offline: bool = False  # handed to the engine directly, not through its API server


@dataclass(frozen=True, kw_only=True)
class TrainWorkload:
    """A training job: ``tokens`` of ``model`` at ``precision``, by ``deadline_s`` (None: as fast as
    the budget allows). In a problem with several workloads it runs in the window ``start_s`` to
    ``end_s`` (seconds from the horizon's start) and its deadline is the window's length; alone it
    is named ``""``."""

    name: str = ""
    model: ModelSpec
    model_id: str
    tokens: float
    precision: Precision
    seq_len: int
    min_global_batch: int  # sequences per step
    max_global_batch: int
    deadline_s: float | None
    stack: str | None = None  # training stack (catalogs/stacks.yaml); None: each vendor's default
    start_s: float = 0.0
    end_s: float | None = None  # None: alone, its deadline counted from the start

    kind: ClassVar[str] = "train"  # the label outputs and the calibration bands use


@dataclass(frozen=True, kw_only=True)
class ServeWorkload:
    """Serving ``model`` to request classes (``demands``) in any of ``precisions`` (weights) with
    the KV cache in ``kv_precision``. In a problem with several workloads its demand holds from
    ``start_s`` to ``end_s``; alone it is named ``""`` and holds over the whole horizon."""

    name: str = ""
    model: ModelSpec
    model_id: str
    demands: tuple[Demand, ...]
    precisions: tuple[str, ...]
    kv_precision: str = "fp16"
    stack: str | None = None  # serving engine (catalogs/stacks.yaml); None: each vendor's default
    start_s: float = 0.0
    end_s: float | None = None

    kind: ClassVar[str] = "serve"

    @property
    def total_demand(self) -> float:
        """Output tokens per second over all request classes."""
        return sum(d.output_tokens_per_s for d in self.demands)


Workload = TrainWorkload | ServeWorkload


class Limits(TypedDict, total=False):
    """The shared limits ``Problem.with_limits`` changes (None: no limit)."""

    budget_usd: float | None
    power_cap_w: float | None


@dataclass(frozen=True, kw_only=True)
class Problem:
    """A validated problem, in SI units and catalog ids."""

    name: str
    path: Path
    description: str
    workloads: tuple[Workload, ...]  # one, named "", or several, each in its time window
    objective: Objective  # min_cost or min_time (min_power only in a repair's relaxed targets)
    budget_usd: float | None
    budget_covers: BudgetCovers
    datacenter: bool
    power_cap_w: float | None  # IT power (from site.power_cap_kw, or the facility cap over the PUE)
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
    confidence: int | None = None  # plan so targets hold with this probability (percent)
    buy_gpus: tuple[str, ...] | None = None  # GPUs that may be bought (None: all of ``gpus``)
    end_of_life: tuple[str, ...] = ()  # GPUs not bought because they are no longer sold new
    inventory: tuple[Owned, ...] = ()
    offers: tuple[str, ...] = ()  # cloud offers that may be rented
    offers_anywhere: tuple[str, ...] = ()  # the offers were the region's export rules lifted
    max_units: tuple[tuple[str, int], ...] = ()  # (GPU or server id, most units bought)
    allow_workstations: bool = True  # towers, desktops and consumer rigs may be chosen (not in a data centre)
    allow_used: bool = False  # GPUs bought at their used-market price where the catalog has one
    maintenance_per_year: float = 0.0
    colocation_usd_per_kw_month: float = 0.0
    installation_usd_per_server: float = 0.0
    racks: RackLimits | None = None
    prices: tuple[PriceOverride, ...] = ()
    region: str | None = None
    oversubscription: float = 1.0  # leaf downlinks per uplink in a two-tier fabric
    memory_headroom: float = 0.0  # share of each GPU's memory a training plan leaves free
    reliability: Reliability = Reliability()  # failures and recovery of a training job (default: none)
    facility_power_cap_w: float | None = None  # the cap as stated at the wall (IT power x PUE), if it was
    # the catalog at this problem's prices, as ``with_prices`` resolved it (None: not yet priced)
    catalog: Catalog | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # the closed sets may be given by their names (``objective="min_time"``)
        object.__setattr__(self, "objective", Objective(self.objective))
        object.__setattr__(self, "budget_covers", BudgetCovers(self.budget_covers))

    def may_buy(self, gpu: str) -> bool:
        return gpu in (self.buy_gpus if self.buy_gpus is not None else self.gpus)

    def with_quotes(self, items: set[str]) -> Problem:
        """The problem with the GPUs no longer sold new that ``items`` quote a price for bought (at it)."""
        quoted = {g for g in self.end_of_life if g in items}
        if not quoted:
            return self
        buy = tuple(g for g in self.gpus if g in (self.buy_gpus or ()) or g in quoted)
        return replace(self, buy_gpus=buy, end_of_life=tuple(g for g in self.end_of_life if g not in quoted))

    def buy_cap(self, item: str) -> int | None:
        """Most units of a GPU or server the problem may buy (None: no cap)."""
        if item in self.gpus and not self.may_buy(item):
            return 0
        return dict(self.max_units).get(item)

    def with_limits(self, **fields: Unpack[Limits]) -> Problem:
        """The problem with shared limits (budget_usd, power_cap_w) changed."""
        return replace(self, **fields)

    def with_time_limit(self, seconds: float | None) -> Problem:
        """The problem with its MIP time limit (``solver.time_limit_s``) set to ``seconds``, checked
        as the problem file's is (a second to a day); None keeps the file's."""
        if seconds is None:
            return self
        try:
            if isinstance(seconds, bool):  # pydantic would read True as 1 s
                raise ValueError(seconds)
            solver = SolverOptions.model_validate({**self.solver.model_dump(), "time_limit_s": seconds})
        except (ValidationError, ValueError):
            raise ProblemError(f"time limit {seconds!r}: expected a number of seconds from {MIN_TIME_LIMIT_S} to "
                               f"{MAX_TIME_LIMIT_S:,} (a day). To fix: pass --time-limit (or time_limit_s) within "
                               "that range, or leave it out for the problem's solver.time_limit_s.") from None
        return replace(self, solver=solver) if solver != self.solver else self

    @property
    def workload(self) -> Workload:
        """The workload of a problem with one (what/if tools that change a deadline, the tokens or
        the demand work on one workload)."""
        if len(self.workloads) != 1:
            names = ", ".join(w.name for w in self.workloads)
            raise ProblemError(f"{self.path}: this works on a problem with one workload; it has "
                               f"{len(self.workloads)} ({names}). To fix: run it on a problem with one workload.")
        return self.workloads[0]

    @property
    def training(self) -> TrainWorkload | None:
        """The job of a training problem: its one workload if that trains, else None."""
        w = self.workloads[0]
        return w if len(self.workloads) == 1 and isinstance(w, TrainWorkload) else None

    @property
    def serving(self) -> ServeWorkload | None:
        """The workload of a serving problem: its one workload if that serves, else None."""
        w = self.workloads[0]
        return w if len(self.workloads) == 1 and isinstance(w, ServeWorkload) else None

    def with_workload(self, **fields: Any) -> Problem:
        """The problem with fields of its one workload changed (``deadline_s``, ``tokens``, ``demands``)."""
        return replace(self, workloads=(replace(self.workload, **fields),))

    def alone(self, w: Workload) -> Problem:
        """One workload of several as a problem of its own (the workload then named "", as every
        one-workload problem's is): the shared site, hardware, prices and solver; a serving
        workload's horizon is its window (a training one's deadline already is)."""
        if len(self.workloads) == 1:
            return self
        horizon = self.horizon_years
        if isinstance(w, ServeWorkload) and w.end_s is not None:
            horizon = (w.end_s - w.start_s) / (365.25 * 86400.0)
        return replace(self, name=f"{self.name}/{w.name}", workloads=(replace(w, name=""),), horizon_years=horizon)

    def power_text(self, it_w: float) -> str:
        """IT watts as the problem states its cap: IT power, or also at the wall where the cap is a
        facility one (site.facility_power_cap_kw)."""
        text = f"{it_w / 1e3:,.2f} kW of IT power"
        if self.facility_power_cap_w is not None:
            text += f" ({it_w * self.pue / 1e3:,.2f} kW at the wall, PUE {self.pue:g})"
        return text

    @property
    def power_cap_text(self) -> str:
        """The IT power cap, and the facility cap it comes from where that one binds."""
        assert self.power_cap_w is not None
        text = f"IT power cap {self.power_cap_w / 1e3:,.1f} kW"
        if self.power_field == "site.facility_power_cap_kw" and self.facility_power_cap_w is not None:
            text += f" (the {self.facility_power_cap_w / 1e3:,.1f} kW facility cap at PUE {self.pue:g})"
        return text

    @property
    def power_field(self) -> str:
        """The problem-file field that sets the binding power cap."""
        wall = self.facility_power_cap_w
        binds = wall is not None and self.power_cap_w is not None and abs(wall / self.pue - self.power_cap_w) < 1e-6
        return "site.facility_power_cap_kw" if binds else "site.power_cap_kw"

    @property
    def demands(self) -> tuple[Demand, ...]:
        """Every serving workload's request classes."""
        return tuple(d for w in self.workloads if isinstance(w, ServeWorkload) for d in w.demands)

    @property
    def total_demand(self) -> float:
        return sum(d.output_tokens_per_s for d in self.demands)
