"""Stage 2: load and validate a problem file into a frozen ``Problem``.

A problem names its model (a preset id, or the shape spelled out), the work (tokens), the
objective (``min_cost`` under a deadline, or ``min_time`` under a budget), the site (power
cap, whether it is a data centre), which GPUs are allowed, the plan search grid, and the
solver options. Catalog entries are referred to by id; their numbers are never copied here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict

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

from optimizer.catalog import AT_BATCH, AT_MAX_LOAD, Catalog, gpu_names
from optimizer.catalog.stacks import Kind
from optimizer.errors import CatalogError, ProblemError, suggest
from optimizer.perf.specs import ModelSpec
from optimizer.problem.procurement import (
    Owned,
    OwnedEntry,
    PriceEntry,
    PriceOverride,
    ProcurementEntry,
    RackLimits,
    RacksEntry,
    apply_prices,
    parse_cli_price,
    resolve_procurement,
)
from optimizer.validation import parse_quantity, read_yaml, short_repr, thousands_in_flow, validate

if TYPE_CHECKING:
    from typing_extensions import Unpack

SCHEMA_VERSION = 1
def _positive_quantity(value: object) -> float:
    number = parse_quantity(value)
    if not 0 < number < math.inf:
        raise ValueError(f"must be a positive finite number, got {value!r}")
    return number


# A positive number written as 1e12, '1T', '500B' or '250k', validated (and parsed) by the schema
# before the type check, so one message says what is wrong with any input (not one per type tried).
Quantity = Annotated[float, BeforeValidator(_positive_quantity)]


def _whole_tokens(value: object) -> int:
    """A request length written as 512, '1k' or '32K': a whole number of tokens, 1 to 1M."""
    number = _positive_quantity(value)
    if number != int(number) or number > 1_000_000:
        raise ValueError(f"expected a whole number of tokens from 1 to 1,000,000 such as 512 or '1k', got {value!r}")
    return int(number)


Tokens = Annotated[int, BeforeValidator(_whole_tokens)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class InlineModel(Strict):
    name: str = "custom"
    layers: int = Field(ge=1, le=1000)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int | None = Field(default=None, ge=1)
    ffn_hidden: int = Field(ge=1)
    vocab: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    mlp: Literal["gelu", "swiglu", "relu2"]
    experts: int = Field(default=0, ge=0)
    experts_active: int = Field(default=0, ge=0)
    shared_experts: int = Field(default=0, ge=0)
    expert_ffn_hidden: int = Field(default=0, ge=0)
    dense_layers: int = Field(default=0, ge=0)
    head_dim: int = Field(default=0, ge=0)  # 0: hidden // heads
    tie_embeddings: bool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> InlineModel:
        if self.experts and not (0 < self.experts_active <= self.experts and self.expert_ffn_hidden > 0):
            raise ValueError("an MoE model needs 0 < experts_active <= experts and expert_ffn_hidden > 0")
        if self.hidden % self.heads and not self.head_dim:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.kv_heads and self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        return self

    def spec(self) -> ModelSpec:
        return ModelSpec(
            name=self.name, layers=self.layers, hidden=self.hidden, heads=self.heads,
            kv_heads=self.kv_heads or self.heads, ffn_hidden=self.ffn_hidden, vocab=self.vocab, seq_len=self.seq_len,
            mlp=self.mlp, experts=self.experts, experts_active=self.experts_active,
            shared_experts=self.shared_experts, expert_ffn_hidden=self.expert_ffn_hidden,
            dense_layers=self.dense_layers, attn_head_dim=self.head_dim, tie_embeddings=self.tie_embeddings)


class GlobalBatch(Strict):
    max_seqs: int | None = Field(default=None, ge=1)
    min_seqs: int = Field(default=1, ge=1)
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


class ServeWorkload(Strict):
    kind: Literal["serve"]
    model: str | InlineModel
    precisions: tuple[Literal["fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"], ...] = ("fp16",)
    kv_precision: Literal["fp16", "bf16", "fp8"] = "fp16"
    engine: str | None = None  # catalogs/stacks.yaml serving engine; None: the default for each GPU's vendor
    classes: tuple[RequestClass, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> ServeWorkload:
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"request class names must be unique, got {names}")
        return self


class Workload(Strict):
    kind: Literal["train"] = "train"
    model: str | InlineModel
    tokens: Quantity
    precision: Literal["bf16", "fp16", "fp8", "fp4"] = "bf16"
    stack: str | None = None  # catalogs/stacks.yaml training stack; None: the default for each GPU's vendor
    seq_len: int | None = Field(default=None, ge=1)
    global_batch: GlobalBatch = GlobalBatch(max_tokens=4e6)  # 4M tokens


class TrainPhase(Workload):
    """A training workload of a problem with several: it runs from ``start_days`` and must finish
    by ``deadline_days``, both counted from the start of the horizon."""

    name: str = Field(min_length=1)
    start_days: float = Field(default=0.0, ge=0)
    deadline_days: float = Field(gt=0, le=36_525)


class ServePhase(ServeWorkload):
    """A serving workload of a problem with several: its demand holds from ``start_days`` to
    ``end_days`` (the end of the horizon when omitted)."""

    name: str = Field(min_length=1)
    start_days: float = Field(default=0.0, ge=0)
    end_days: float | None = Field(default=None, gt=0)


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
    power_cap_kw: float | None = Field(default=None, gt=0)
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
    max_gpus: int = Field(default=4096, ge=1, le=1_000_000)
    allow_vendors: tuple[str, ...] | None = None
    exclude_vendors: tuple[str, ...] = ()
    max_units: dict[str, int] = {}  # GPU or server id -> most units that can be bought


class NetworkChoice(Strict):
    """How the scale-out fabric is built: leaf downlinks per uplink (1 = non-blocking fat tree;
    2 = 2:1, half the spine capacity, less bandwidth between servers on different leaves)."""

    oversubscription: float = Field(default=1.0, ge=1.0, le=16.0)


class Cost(Strict):
    horizon_years: float | None = Field(default=None, gt=0, le=20)


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


class SolverOptions(Strict):
    backend: Literal["ortools", "pulp"] = "ortools"
    time_limit_s: float = Field(default=60.0, gt=0, le=86_400)
    mip_gap: float = Field(default=1e-6, ge=0, le=1)


def _workload_kind(value: object) -> str:
    """Which workload schema applies: ``kind`` when given, training otherwise."""
    kind = value.get("kind", "train") if isinstance(value, dict) else getattr(value, "kind", "train")
    return kind if kind in ("train", "serve") else "train"


class ProblemFile(Strict):
    schema_version: int
    name: str
    description: str = ""
    workload: Annotated[Annotated[Workload, Tag("train")] | Annotated[ServeWorkload, Tag("serve")],
                        Discriminator(_workload_kind)] | None = None
    workloads: tuple[Annotated[Annotated[TrainPhase, Tag("train")] | Annotated[ServePhase, Tag("serve")],
                               Discriminator(_workload_kind)], ...] = ()
    objective: Literal["min_cost", "min_time"]
    deadline_days: float | None = Field(default=None, gt=0, le=36_525)  # at most a century
    budget: Budget | None = None
    site: Site = Site()
    hardware: HardwareChoice = HardwareChoice()
    network: NetworkChoice = NetworkChoice()
    cost: Cost = Cost()
    search: Search = Search()
    solver: SolverOptions = SolverOptions()
    confidence: Literal[50, 75, 80, 90, 95] | None = None
    inventory: tuple[OwnedEntry, ...] = ()
    procurement: ProcurementEntry = ProcurementEntry()
    prices: dict[str, float | str | PriceEntry] = {}


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
    precision: str  # training precision
    seq_len: int
    min_global_batch: int  # sequences per step
    max_global_batch: int
    objective: str  # min_cost | min_time
    deadline_s: float | None
    budget_usd: float | None
    budget_covers: str
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
    phases: tuple[Phase, ...] = ()  # several workloads (kind "multi"), each a problem of its own
    # the catalog at this problem's prices, as ``with_prices`` resolved it (None: not yet priced)
    catalog: Catalog | None = field(default=None, compare=False, repr=False)

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


def _gpu_ids(data: dict[str, Any], catalog: Catalog, path: Path) -> dict[str, Any]:
    """``data`` with the GPUs of hardware.allow_gpus / exclude_gpus / max_units and inventory
    written as people say them ("H100 SXM", "4090", "MI300X") turned into catalog ids; a name
    that could be several GPUs is an error that lists them. Names matching nothing are left for
    the id checks (unknown id, with close matches)."""
    def one(text: object, field: str) -> object:
        if not isinstance(text, str) or text in catalog.gpus or text in catalog.servers:
            return text
        found = gpu_names.resolve(text, catalog.gpus)
        if isinstance(found, str):
            return found
        if len(found) > 1:
            raise ProblemError(f"{path}: field '{field}': '{text}' could be any of {', '.join(found)}. "
                               "To fix: name the one you mean (or list each you allow).")
        return text

    out = dict(data)
    hw = data.get("hardware")
    if isinstance(hw, dict):
        hw = dict(hw)
        for key in ("allow_gpus", "exclude_gpus"):
            if isinstance(hw.get(key), list):
                hw[key] = [one(g, f"hardware.{key}[{i}]") for i, g in enumerate(hw[key])]
        if isinstance(hw.get("max_units"), dict):
            hw["max_units"] = {one(k, f"hardware.max_units.{k}"): v for k, v in hw["max_units"].items()}
        out["hardware"] = hw
    if isinstance(data.get("inventory"), list):
        out["inventory"] = [{**e, "gpu": one(e.get("gpu"), f"inventory[{i}].gpu")} if isinstance(e, dict) else e
                            for i, e in enumerate(data["inventory"])]
    return out


def _check_ids(path: Path, field: str, ids: tuple[str, ...], table: Mapping[str, object]) -> None:
    for ident in ids:
        if ident not in table:
            raise ProblemError(f"{path}: field '{field}': unknown id '{ident}'.{suggest(ident, table)}"
                               f" To fix: use one of {', '.join(sorted(table))}.")


def tp_fits(model: ModelSpec, tp: int, serving: bool = False) -> bool:
    """Whether TP can shard the model's attention: it divides the attention heads and, for
    training, it divides the KV heads or is a multiple of them (each KV head then replicated)."""
    if model.heads % tp:
        return False
    return serving or not (model.kv_heads % tp and tp % model.kv_heads)


def _tp_misfit(model: ModelSpec, tp: int) -> str:
    """Why no plan of ``model`` can use TP ``tp`` (for a message)."""
    if model.heads % tp:
        return f"TP {tp} does not divide the {model.heads} attention heads of {model.name}"
    return (f"TP {tp} neither divides the {model.kv_heads} KV heads of {model.name} nor is a multiple of them "
            "(training shards or replicates whole KV heads)")


def _check_tp(path: Path, data: dict[str, Any], workloads: list[tuple[ModelSpec, bool]]) -> None:
    """Reject a TP value the problem's own search grid lists that no workload's model can use
    (``workloads``: each workload's model and whether it is served). The default grid is left
    to the planner, which skips what does not fit."""
    given = (data.get("search") or {}).get("tp") or ()
    for i, tp in enumerate(given):
        if any(tp_fits(model, tp, serving) for model, serving in workloads):
            continue
        fits = sorted({t for m, s in workloads for t in range(1, m.heads + 1) if tp_fits(m, t, s)})
        raise ProblemError(f"{path}: field 'search.tp[{i}]': {_tp_misfit(workloads[0][0], tp)}, so no plan can "
                           f"use it. To fix: drop it, or use TP values that fit ({', '.join(map(str, fits))}).")


def resolve_model(ref: str | InlineModel, catalog: Catalog, path: Path, field: str = "workload.model") -> ModelSpec:
    """A preset id, a YAML file with the shape keys, or an inline shape → ModelSpec."""
    if isinstance(ref, InlineModel):
        return ref.spec()
    if ref in catalog.models:
        return catalog.models[ref].spec()
    file = Path(ref) if Path(ref).is_absolute() else path.parent / ref
    if ref.endswith((".yaml", ".yml")) and file.exists():
        data = read_yaml(file, ProblemError)
        return validate(InlineModel, data, file, ProblemError).spec()
    raise ProblemError(f"{path}: field '{field}': unknown model '{ref}'.{suggest(ref, catalog.models)}"
                       f" To fix: use a preset ({', '.join(sorted(catalog.models))}), a path to a YAML"
                       " file with the shape keys, or spell the shape out (layers, hidden, heads,"
                       " kv_heads, ffn_hidden, vocab, seq_len, mlp).")


def load_problem(path: Path | str, catalog: Catalog) -> Problem:
    """Read and validate a problem file against ``catalog``."""
    path = Path(path)
    return problem_from_data(read_yaml(path, ProblemError, thousands_in_flow), path, catalog)


def load_priced(path: Path | str, catalog: Catalog, cli_prices: tuple[str, ...] = ()) -> tuple[Problem, Catalog]:
    """The problem and the catalog at its prices (see ``with_prices``)."""
    problem = with_prices(load_problem(path, catalog), catalog, cli_prices)
    assert problem.catalog is not None
    return problem, problem.catalog


def with_prices(problem: Problem, catalog: Catalog, cli_prices: tuple[str, ...] = ()) -> Problem:
    """The problem carrying the catalog at its prices: the problem file's price book, then any
    ``--price ID=VALUE`` from the command line (which wins). The problem keeps the list, so the
    output can say which prices it used."""
    book = {p.item: p for p in problem.prices}
    for spec in cli_prices:
        override = parse_cli_price(spec, catalog)
        book[override.item] = override
    prices = tuple(book[k] for k in sorted(book))
    return replace(problem, prices=prices, catalog=apply_prices(catalog, prices))


def problem_from_data(data: dict[str, Any], path: Path, catalog: Catalog, check_grid: bool = True) -> Problem:
    """Validate a problem given as a mapping (as read from YAML); ``path`` names it in messages.
    ``check_grid``: reject search-grid TP values the model cannot use (off for the workloads of a
    problem with several, whose grid is checked against all their models at once)."""
    data = _gpu_ids(data, catalog, path)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ProblemError(f"{path}: schema_version is {short_repr(data.get('schema_version'))}; this gpuopt reads "
                           f"{SCHEMA_VERSION}. To fix: add 'schema_version: 1' at the top.")
    spec: ProblemFile = validate(ProblemFile, data, path, ProblemError)
    if spec.workloads:
        return _several(data, spec, path, catalog)
    w = spec.workload
    if w is None:
        raise ProblemError(f"{path}: no 'workload'. To fix: add a workload (kind: train or serve), or a list "
                           "'workloads' of several, each with a name and a time window.")
    model = resolve_model(w.model, catalog, path)
    serving = isinstance(w, ServeWorkload)
    if check_grid:
        _check_tp(path, data, [(model, serving)])
    seq_len = model.seq_len if isinstance(w, ServeWorkload) else (w.seq_len or model.seq_len)
    tokens = 0.0 if isinstance(w, ServeWorkload) else float(w.tokens)

    if serving and spec.objective != "min_cost":
        raise ProblemError(f"{path}: field 'objective': a serving workload is planned at minimum cost for its "
                           "demand. To fix: use objective: min_cost (the demand is in workload.classes).")
    if spec.objective == "min_cost" and spec.deadline_days is None and not serving:
        raise ProblemError(f"{path}: objective min_cost needs 'deadline_days'. To fix: add deadline_days: 30,"
                           " or use objective: min_time with a budget.")
    if spec.objective == "min_time" and spec.budget is None and spec.site.power_cap_kw is None:
        raise ProblemError(f"{path}: objective min_time needs a 'budget' (or at least a power cap), or the "
                           "fastest cluster is unbounded. To fix: add budget: {usd: 500000}.")
    budget = float(spec.budget.usd) if spec.budget else None

    gb = GlobalBatch(max_seqs=1) if isinstance(w, ServeWorkload) else w.global_batch
    max_seqs = gb.max_seqs
    if max_seqs is None:
        max_tokens = float(gb.max_tokens) if gb.max_tokens is not None else 4e6
        max_seqs = max(1, int(max_tokens // seq_len))
    if gb.min_seqs > max_seqs:
        raise ProblemError(f"{path}: field 'workload.global_batch': min_seqs {gb.min_seqs} exceeds max_seqs "
                           f"{max_seqs}. To fix: lower min_seqs or raise max_seqs.")

    hw = spec.hardware
    _check_ids(path, "hardware.allow_gpus", hw.allow_gpus or (), catalog.gpus)
    _check_ids(path, "hardware.exclude_gpus", hw.exclude_gpus, catalog.gpus)
    _check_ids(path, "hardware.exclude_servers", hw.exclude_servers, catalog.servers)
    _check_ids(path, "hardware.exclude_fabrics", hw.exclude_fabrics, catalog.fabrics)
    # by default every purchasable GPU; entries kept for calibration only (purchasable: false) when listed
    allowed = hw.allow_gpus if hw.allow_gpus is not None else tuple(g for g, gpu in catalog.gpus.items()
                                                                     if gpu.purchasable)
    gpus = tuple(g for g in allowed if g not in hw.exclude_gpus)
    if not gpus:
        raise ProblemError(f"{path}: field 'hardware': the allow and exclude lists leave no GPU. "
                           "To fix: allow at least one GPU.")

    extra = resolve_procurement(path, spec, gpus, catalog)
    fac = catalog.facility
    pue = spec.site.pue or (fac.pue.datacenter.value if spec.site.datacenter else fac.pue.other.value)
    return Problem(
        name=spec.name,
        path=path,
        description=spec.description,
        model=model,
        model_id=w.model if isinstance(w.model, str) else model.name,
        tokens=tokens,
        precision="bf16" if isinstance(w, ServeWorkload) else w.precision,
        seq_len=seq_len,
        min_global_batch=gb.min_seqs,
        max_global_batch=max_seqs,
        objective=spec.objective,
        deadline_s=spec.deadline_days * 86400.0 if spec.deadline_days else None,
        budget_usd=budget,
        budget_covers=spec.budget.covers if spec.budget else "capex",
        datacenter=spec.site.datacenter,
        allow_workstations=(spec.site.allow_workstations if spec.site.allow_workstations is not None
                            else not spec.site.datacenter),
        power_cap_w=spec.site.power_cap_kw * 1e3 if spec.site.power_cap_kw else None,
        electricity_usd_per_kwh=spec.site.electricity_usd_per_kwh or fac.electricity_usd_per_kwh.value,
        pue=pue,
        horizon_years=spec.cost.horizon_years or fac.amortisation_years.value,
        load_factor=fac.load_factor.value,
        exclude_servers=hw.exclude_servers,
        exclude_fabrics=hw.exclude_fabrics,
        max_gpus=hw.max_gpus,
        search=spec.search,
        solver=spec.solver,
        kind="serve" if serving else "train",
        demands=tuple(Demand(c.name, c.input_len, c.output_len, c.demand,
                             c.ttft_ms / 1e3 if c.ttft_ms else None, c.tpot_ms / 1e3 if c.tpot_ms else None)
                      for c in w.classes) if isinstance(w, ServeWorkload) else (),
        serve_precisions=tuple(dict.fromkeys(w.precisions)) if isinstance(w, ServeWorkload) else (),
        kv_precision=w.kv_precision if isinstance(w, ServeWorkload) else "fp16",
        stack=(_stack(path, catalog, "serving", w.engine) if isinstance(w, ServeWorkload)
               else _stack(path, catalog, "training", w.stack)),
        confidence=spec.confidence,
        oversubscription=spec.network.oversubscription,
        **extra,
    )


def _stack(path: Path, catalog: Catalog, kind: Kind, ident: str | None) -> str | None:
    """A stack or engine named by id or alias, as its id (bad names name the file and field)."""
    if ident is None:
        return None
    field = "workload.stack" if kind == "training" else "workload.engine"
    try:
        return catalog.efficiency.stack(kind, ident).id
    except CatalogError as exc:
        raise ProblemError(f"{path}: field '{field}': {exc}") from None


def serve_regime(demand: Demand) -> str:
    """The band regime a request class is planned in: at a batch where a latency limit caps the
    batch, at maximum load (the most sequences that fit) where none does."""
    return AT_BATCH if demand.ttft_s is not None or demand.tpot_s is not None else AT_MAX_LOAD


def answer_regime(demands: tuple[Demand, ...] | list[Demand]) -> str | None:
    """The band regime of a serving answer: at maximum load where any class is planned so (its band
    is the wider), at a batch where every class has a latency limit; None without classes."""
    regimes = {serve_regime(d) for d in demands}
    return AT_MAX_LOAD if AT_MAX_LOAD in regimes else (AT_BATCH if regimes else None)


def confidence_factor(problem: Problem, catalog: Catalog, gpu_id: str, precision: str | None = None,
                      demand: Demand | None = None) -> float:
    """What a GPU's predicted rates are multiplied by to plan at the problem's confidence: the
    (100 - confidence)th percentile of measured / predicted over the out-of-source rows, from the
    wider band where the GPU's efficiency values (at ``precision``, default the problem's) are
    borrowed from another family or stack, and for a serving ``demand`` the band of its regime."""
    if problem.confidence is None:
        return 1.0
    band = catalog.band_for(problem.kind, problem.stack, (gpu_id, precision or problem.precision),
                            regime=serve_regime(demand) if demand is not None else None)
    return band.ratio(100 - problem.confidence)


PHASE_FIELDS = {"name", "start_days", "deadline_days", "end_days"}


def _several(data: dict[str, Any], spec: ProblemFile, path: Path, catalog: Catalog) -> Problem:
    """A problem with several workloads: each becomes a problem of its own (the shared site,
    hardware, prices and solver, its deadline or horizon the length of its window), and the
    whole a ``Problem`` of kind "multi" holding them as phases."""
    def bad(field: str, what: str, fix: str) -> ProblemError:
        return ProblemError(f"{path}: field '{field}': {what}. To fix: {fix}.")

    if spec.workload is not None:
        raise bad("workload", "give either 'workload' or 'workloads', not both", "move it into the list 'workloads'")
    if spec.objective != "min_cost":
        raise bad("objective", "several workloads are planned at minimum cost, each by its own deadline",
                  "use objective: min_cost")
    if spec.deadline_days is not None:
        raise bad("deadline_days", "with several workloads each training workload has its own deadline",
                  "give deadline_days in each entry of 'workloads' instead")
    names = [w.name for w in spec.workloads]
    if len(set(names)) != len(names):
        raise bad("workloads", f"names must be unique, got {names}", "give each workload its own name")
    horizon_years = spec.cost.horizon_years or catalog.facility.amortisation_years.value
    horizon_days = horizon_years * 365.25
    phases = []
    for i, w in enumerate(spec.workloads):
        train = isinstance(w, TrainPhase)
        end = w.deadline_days if isinstance(w, TrainPhase) else (w.end_days or horizon_days)
        where = f"workloads[{i}] ({w.name})"
        if end <= w.start_days:
            raise bad(where, f"it starts on day {w.start_days:g} and ends on day {end:g}",
                      "make deadline_days (or end_days) later than start_days")
        if end > horizon_days * (1 + 1e-9):
            raise bad(where, f"it ends on day {end:g}, after the {horizon_years:g}-year horizon "
                      f"({horizon_days:,.0f} days)", "end it sooner or raise cost.horizon_years")
        sub = {k: v for k, v in data.items() if k not in ("workloads", "name")}
        sub.update(name=f"{spec.name}/{w.name}", objective="min_cost",
                   workload=w.model_dump(mode="json", exclude=PHASE_FIELDS, exclude_none=True))
        if train:
            sub["deadline_days"] = end - w.start_days
        else:
            sub["cost"] = {**(data.get("cost") or {}), "horizon_years": (end - w.start_days) / 365.25}
        try:
            alone = problem_from_data(sub, path, catalog, check_grid=False)
        except ProblemError as exc:  # name the entry: its fields are checked as the workload of its own problem
            raise ProblemError(str(exc).replace("field 'workload.", f"field '{where}.")) from exc
        phases.append(Phase(w.name, "train" if train else "serve", alone, w.start_days * 86400.0, end * 86400.0))
    _check_tp(path, data, [(ph.problem.model, ph.kind == "serve") for ph in phases])
    first = phases[0].problem
    return replace(first, name=spec.name, description=spec.description, kind="multi", tokens=0.0,
                   deadline_s=None, demands=(), horizon_years=horizon_years, phases=tuple(phases))
