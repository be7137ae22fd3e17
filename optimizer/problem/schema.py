"""The schema of a problem file: pydantic models of every section (workload, objective, site,
hardware, network, cost, search grid, solver), with the messages a wrong value gets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from optimizer.catalog.model_records import ModelShape
from optimizer.perf.specs import ModelSpec
from optimizer.problem.enums import Backend
from optimizer.problem.procurement import (
    OwnedEntry,
    PriceEntry,
    ProcurementEntry,
    RacksEntry,
)
from optimizer.validation import Count, Fraction, Number, parse_positive

if TYPE_CHECKING:
    pass

SCHEMA_VERSION = 1
# A positive number written as 1e12, '1T', '500B' or '250k', validated (and parsed) by the schema
# before the type check, so one message says what is wrong with any input (not one per type tried).
Quantity = Annotated[float, BeforeValidator(parse_positive)]


def _whole_tokens(value: object) -> int:
    """A request length written as 512, '1k' or '32K': a whole number of tokens, 1 to 1M."""
    number = parse_positive(value)
    if number != int(number) or number > 1_000_000:
        raise ValueError(f"expected a whole number of tokens from 1 to 1,000,000 such as 512 or '1k', got {value!r}")
    return int(number)


Tokens = Annotated[int, BeforeValidator(_whole_tokens)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class InlineModel(ModelShape):
    """A model spelled out in the problem file (workload.model), checked as a catalog preset is."""

    name: str = "custom"

    def spec(self) -> ModelSpec:
        return self.shape_spec(self.name)


class GlobalBatch(Strict):
    max_seqs: Count | None = Field(default=None, ge=1)
    min_seqs: Count = Field(default=1, ge=1)
    max_tokens: Quantity | None = None


class RequestClass(Strict):
    """One kind of request a serving cluster must sustain, with its latency limits."""

    name: str
    input_len: Tokens
    output_len: Tokens
    output_tokens_per_s: Quantity | None = None
    requests_per_s: float | None = Field(default=None, gt=0)
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    # a batch job handed to the engine directly (vLLM's LLM.generate), not requests through its API
    # server, which spends time on every step streaming tokens to clients
    offline: bool = False

    @model_validator(mode="after")
    def _one_demand(self) -> RequestClass:
        if (self.output_tokens_per_s is None) == (self.requests_per_s is None):
            raise ValueError("give exactly one of output_tokens_per_s and requests_per_s")
        return self

    @property
    def demand(self) -> float:
        """Output tokens per second to sustain."""
        if self.output_tokens_per_s is not None:
            return float(self.output_tokens_per_s)
        return (self.requests_per_s or 0.0) * self.output_len


class ServeSpec(Strict):
    kind: Literal["serve"]
    model: str | InlineModel
    precisions: tuple[Literal["fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"], ...] = ("fp16",)
    kv_precision: Literal["fp16", "bf16", "fp8"] = "fp16"
    engine: str | None = None  # catalogs/stacks.yaml serving engine; None: the default for each GPU's vendor
    classes: tuple[RequestClass, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> ServeSpec:
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"request class names must be unique, got {names}")
        return self


DEFAULT_BATCH_TOKENS = 4e6  # tokens per step a training job may take at most, unless its problem says


class TrainSpec(Strict):
    kind: Literal["train"] = "train"
    model: str | InlineModel
    tokens: Quantity
    precision: Literal["bf16", "fp16", "fp8", "fp4"] = "bf16"
    stack: str | None = None  # catalogs/stacks.yaml training stack; None: the default for each GPU's vendor
    seq_len: int | None = Field(default=None, ge=1)
    global_batch: GlobalBatch = GlobalBatch(max_tokens=DEFAULT_BATCH_TOKENS)


class TrainPhase(TrainSpec):
    """A training workload of a problem with several: it runs from ``start_days`` and must finish
    by ``deadline_days``, both counted from the start of the horizon."""

    name: str = Field(min_length=1)
    start_days: Number = Field(default=0.0, ge=0)
    deadline_days: Number = Field(gt=0, le=36_525)


class ServePhase(ServeSpec):
    """A serving workload of a problem with several: its demand holds from ``start_days`` to
    ``end_days`` (the end of the horizon when omitted)."""

    name: str = Field(min_length=1)
    start_days: Number = Field(default=0.0, ge=0)
    end_days: Number | None = Field(default=None, gt=0)


class Budget(Strict):
    usd: Quantity
    covers: Literal["capex", "tco"] = "capex"

    @model_validator(mode="before")
    @classmethod
    def _a_number(cls, v: object) -> object:
        """``budget: 500k`` (a number or a quantity alone) is that many dollars of capex."""
        return v if isinstance(v, dict) else {"usd": v}


class Site(Strict):
    datacenter: bool = True
    # workstation towers, desktops and consumer rigs: allowed outside a data centre, in one only if true
    allow_workstations: bool | None = None
    power_cap_kw: float | None = Field(default=None, gt=0)  # IT power: what the GPUs, servers and network draw
    facility_power_cap_kw: float | None = Field(default=None, gt=0)  # at the wall: IT power x PUE (cooling too)
    electricity_usd_per_kwh: float | None = Field(default=None, gt=0, le=10)
    pue: float | None = Field(default=None, ge=1.0, le=3.0)
    region: str | None = None  # an export-control region of catalogs/regions.yaml
    colocation: bool = False  # pay a colocation rent per kW of IT load
    colocation_usd_per_kw_month: float | None = Field(default=None, ge=0, le=10_000)
    maintenance_per_year: float | None = Field(default=None, ge=0, le=1)
    installation_usd_per_server: float = Field(default=0.0, ge=0)
    racks: RacksEntry | None = None
    floor_m2: float | None = Field(default=None, gt=0)


class HardwareChoice(Strict):
    allow_gpus: tuple[str, ...] | None = None
    exclude_gpus: tuple[str, ...] = ()
    exclude_servers: tuple[str, ...] = ()
    exclude_fabrics: tuple[str, ...] = ()
    max_gpus: Count = Field(default=4096, ge=1, le=1_000_000)
    allow_vendors: tuple[str, ...] | None = None
    exclude_vendors: tuple[str, ...] = ()
    max_units: dict[str, Count] = {}  # GPU or server id -> most units that can be bought
    allow_used: bool = False  # buy GPUs at their used-market price where the catalog has one
    # share of each GPU's memory no training plan uses (allocator fragmentation); None: the catalog's
    memory_headroom: Fraction | None = Field(default=None, ge=0, lt=0.9)


class NetworkChoice(Strict):
    """How the scale-out fabric is built: leaf downlinks per uplink (1 = non-blocking fat tree;
    2 = 2:1, half the spine capacity, less bandwidth between servers on different leaves)."""

    oversubscription: float = Field(default=1.0, ge=1.0, le=16.0)


class Cost(Strict):
    horizon_years: float | None = Field(default=None, gt=0, le=20)


class GoodputChoice(Strict):
    """Failures and recovery of a training job (None: the catalog's, catalogs/facility.yaml)."""

    interruptions_per_gpu_day: float | None = Field(default=None, ge=0, le=1)
    checkpoint_minutes: float | None = Field(default=None, ge=0, le=1440)
    restart_minutes: float | None = Field(default=None, ge=0, le=10080)


def _grid_value(what: str, allowed: range, examples: str) -> BeforeValidator:
    """The check of a search-grid entry: a whole number in ``allowed`` (not a bool, a fraction or a string)."""
    def check(value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value in allowed:
            return value
        span = f"{allowed.start} to {allowed.stop - 1}"
        raise ValueError(f"expected {what} as a whole number from {span}, got {value!r}. "
                         f"To fix: use values such as {examples}")
    return BeforeValidator(check)


TensorParallel = Annotated[int, _grid_value("a tensor-parallel degree", range(1, 1025), "[1, 2, 4, 8]")]
PipelineParallel = Annotated[int, _grid_value("a pipeline-parallel degree", range(1, 1001), "[1, 2, 4, 8]")]
ContextParallel = Annotated[int, _grid_value("a context-parallel degree", range(1, 1025), "[1, 2, 4]")]
ExpertParallel = Annotated[int, _grid_value("an expert-parallel degree", range(1, 1025), "[1, 2, 4, 8]")]
MicroBatch = Annotated[int, _grid_value("a micro-batch size in sequences", range(1, 4097), "[1, 2, 4, 8]")]
PerStage = Annotated[int, _grid_value("a number of micro-batches per pipeline stage", range(1, 4097), "[1, 2, 4, 8]")]
Chunks = Annotated[int, _grid_value("a number of model chunks per GPU", range(1, 1001), "[1, 2, 4]")]
ZeroStage = Annotated[int, _grid_value("a ZeRO stage", range(0, 4), "[1, 3]")]
Recompute = Literal["none", "selective", "full"]


class Search(Strict):
    """The plan grid: each field a non-empty list of the values the planner tries."""

    tp: tuple[TensorParallel, ...] = (1, 2, 4, 8)
    pp: tuple[PipelineParallel, ...] = (1, 2, 4, 8, 16)
    micro_batch: tuple[MicroBatch, ...] = (1, 2, 4, 8)
    micro_batches_per_stage: tuple[PerStage, ...] = (1, 2, 4, 8)
    recompute: tuple[Recompute, ...] = ("none", "selective", "full")
    zero: tuple[ZeroStage, ...] = (1, 3)
    # interleaved 1F1B chunks per GPU (used when PP > 1). 4 shrinks the bubble and, per Korthikanti
    # et al., the extra activation memory more than 2 does; add 2 where inter-node sends are slow
    virtual_stages: tuple[Chunks, ...] = (1, 4)
    cp: tuple[ContextParallel, ...] = (1,)  # context parallelism: add 2, 4, 8 for long sequences
    ep: tuple[ExpertParallel, ...] = (1, 2, 4, 8)  # expert parallelism (MoE models only)

    @field_validator("*", mode="before")
    @classmethod
    def _a_list(cls, v: object, info: ValidationInfo) -> object:
        """A scalar or a mapping where a list belongs gets a message that says so."""
        if isinstance(v, (list, tuple)):
            return v
        example = ", ".join(str(x) for x in cls.model_fields[str(info.field_name)].default)
        raise ValueError(f"expected a list such as [{example}], got {v!r}. To fix: write the values in brackets")

    @field_validator("*")
    @classmethod
    def _non_empty(cls, v: tuple[Any, ...]) -> tuple[Any, ...]:
        if not v:
            raise ValueError("expected at least one value, got an empty list. To fix: list the values to try, "
                             "or remove the key for the default")
        return tuple(sorted(set(v)))


# the MIP time limits a problem or --time-limit may set: both backends run at least a second
# (milp.backends: HiGHS's limit in whole milliseconds from 1 s, CBC's in whole seconds), and a day at most
MIN_TIME_LIMIT_S, MAX_TIME_LIMIT_S = 1, 86_400


class SolverOptions(Strict):
    backend: Backend = Backend.ORTOOLS
    time_limit_s: float = Field(default=60.0, ge=MIN_TIME_LIMIT_S, le=MAX_TIME_LIMIT_S)
    mip_gap: float = Field(default=1e-6, ge=0, le=1)


def _workload_kind(value: object) -> str:
    """Which workload schema applies: ``kind`` when given, training otherwise."""
    kind = value.get("kind", "train") if isinstance(value, dict) else getattr(value, "kind", "train")
    return kind if kind in ("train", "serve") else "train"


class ProblemFile(Strict):
    schema_version: int
    name: str
    description: str = ""
    workload: Annotated[Annotated[TrainSpec, Tag("train")] | Annotated[ServeSpec, Tag("serve")],
                        Discriminator(_workload_kind)] | None = None
    workloads: tuple[Annotated[Annotated[TrainPhase, Tag("train")] | Annotated[ServePhase, Tag("serve")],
                               Discriminator(_workload_kind)], ...] = ()
    objective: Literal["min_cost", "min_time"]
    deadline_days: Number | None = Field(default=None, gt=0, le=36_525)  # at most a century
    budget: Budget | None = None
    site: Site = Site()
    hardware: HardwareChoice = HardwareChoice()
    network: NetworkChoice = NetworkChoice()
    cost: Cost = Cost()
    goodput: GoodputChoice = GoodputChoice()
    search: Search = Search()
    solver: SolverOptions = SolverOptions()
    confidence: Literal[50, 75, 80, 90, 95] | None = None
    inventory: tuple[OwnedEntry, ...] = ()
    procurement: ProcurementEntry = ProcurementEntry()
    prices: dict[str, float | str | PriceEntry] = {}
