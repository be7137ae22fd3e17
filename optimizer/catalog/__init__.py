"""Stage 1: load and validate the hardware, network, power and price catalogs.

Catalog files are YAML with units in their keys (``memory_gb``, ``mem_bw_gbs``,
``bf16_tflops``); records are frozen pydantic models, and ``Catalog.hardware`` converts a
GPU in a server on a fabric to the SI ``perf.Hardware`` the performance model uses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict, TypeVar, get_args, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from optimizer.catalog.stacks import Efficiency, Engine, Kind, Resolved, TrainStack, load_efficiency
from optimizer.errors import CatalogError, suggest
from optimizer.perf.params import ServeParams, TrainParams
from optimizer.perf.serve import SERVE_PRECISIONS, math_precision
from optimizer.perf.specs import PRECISIONS, Device, Hardware, Link, ModelSpec
from optimizer.validation import read_yaml, validate

SCHEMA_VERSION = 1
GB = 1e9
HOURS_PER_YEAR = 8766.0  # 365.25 days


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(Record):
    usd: float = Field(ge=0)
    date: str
    source: str
    assumption: bool = False
    override: bool = False  # set by a price book or --price, not read from a catalog file


class Sourced(Record):
    value: float = Field(ge=0)
    date: str | None = None
    source: str
    assumption: bool = False


GpuFamily = Literal["volta", "turing", "ampere", "ampere-ga10x", "ada", "hopper", "blackwell", "blackwell-gb20x",
                    "cdna2", "cdna3", "cdna4", "gaudi2", "gaudi3"]
GPU_FAMILIES: tuple[str, ...] = get_args(GpuFamily)
# The numeric specs of a GPU entry; each one present needs a source in the entry's ``specs`` map.
SPEC_FIELDS = ("memory_gb", "mem_bw_gbs", "bf16_tflops", "fp16_tflops", "fp16_acc16_tflops", "fp8_tflops",
               "fp4_tflops", "link_bw_gbs", "tdp_w")


class SpecSource(Record):
    """A document a GPU figure is read from: what it is, where to find it, and when."""

    title: str
    where: str  # repository + path + commit, URL, or document id
    date: str  # publication or access date, "YYYY-MM" or "YYYY-MM-DD"

    @field_validator("date")
    @classmethod
    def _dated(cls, value: str) -> str:
        if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?", value):
            raise ValueError(f"expected a date as YYYY-MM or YYYY-MM-DD, got {value!r}")
        return value


class Gpu(Record):
    id: str
    name: str
    vendor: str
    family: GpuFamily  # the microarchitecture the performance model's efficiencies are keyed by
    form_factor: Literal["sxm", "oam", "pcie", "workstation", "consumer"]
    memory_gb: float = Field(gt=0, le=4096)
    mem_bw_gbs: float = Field(gt=0, le=100_000)
    bf16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    fp16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    fp8_tflops: float | None = Field(default=None, gt=0, le=100_000)
    fp4_tflops: float | None = Field(default=None, gt=0, le=100_000)  # dense FP4 / NVFP4 / MXFP4
    # FP16 tensor math with FP16 accumulation, where it runs faster than with FP32 accumulation
    # (GeForce cards: twice the rate); the 16-bit figures above are FP32-accumulate
    fp16_acc16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    link: str
    link_bw_gbs: float = Field(gt=0, le=100_000)
    link_domain: int | None = Field(default=None, ge=1)
    host_bus: str
    tdp_w: float = Field(gt=0, le=10_000)
    datacenter_license: bool
    purchasable: bool = True  # False: kept for calibration; offered only when a problem lists it in allow_gpus
    price: Price
    specs: dict[str, str]  # numeric spec (memory_gb, bf16_tflops, ...) -> key of the file's spec_sources
    source: str
    note: str | None = None

    @model_validator(mode="after")
    def _has_a_precision(self) -> Gpu:
        if not (self.bf16_tflops or self.fp16_tflops or self.fp8_tflops):
            raise ValueError("needs at least one of bf16_tflops, fp16_tflops, fp8_tflops")
        return self

    def tflops(self, precision: str) -> float | None:
        return getattr(self, f"{precision}_tflops", None)

    def spec_problems(self, sources: dict[str, SpecSource]) -> list[tuple[str, str]]:
        """(field of ``specs``, what is wrong and how to fix it) for each figure without a dated source."""
        problems = []
        used = sorted({key for key in self.specs.values() if key in sources})
        hint = f" (this entry's other figures use {', '.join(used)})" if used else ""
        for name in SPEC_FIELDS:
            if getattr(self, name) is not None and name not in self.specs:
                problems.append((name, f"{name} {getattr(self, name)!r} has no source. To fix: add '{name}: <key>' "
                                       f"under specs, <key> naming the spec_sources document it is read from{hint}"))
        for name, key in self.specs.items():
            if name not in SPEC_FIELDS:
                problems.append((name, f"'{name}' is not a numeric spec of a GPU.{suggest(name, SPEC_FIELDS)} "
                                       f"To fix: use one of {', '.join(SPEC_FIELDS)}"))
            elif getattr(self, name) is None:
                problems.append((name, f"the entry has no {name} to source. To fix: remove it from specs "
                                       "or add the figure"))
            elif key not in sources:
                problems.append((name, f"'{key}' is not a key of spec_sources.{suggest(key, sources)} To fix: "
                                       f"name a key of spec_sources, or add '{key}' there with its title, where "
                                       "and date"))
        return problems


class Server(Record):
    id: str
    name: str
    slots: int = Field(ge=1, le=72)
    full_only: bool
    accepts: tuple[str, ...]
    fabrics: tuple[str, ...]
    price: Price
    base_power_w: float = Field(ge=0, le=100_000)
    power_source: str
    rack_units: int = Field(ge=1, le=60)
    rack_units_source: str
    workstation: bool = False  # a tower, desktop or consumer rig, not a rack-mounted data-centre server


class LinkType(Record):
    id: str
    name: str
    p2p: bool
    efficiency: float = Field(gt=0, le=1)
    latency_us: float = Field(ge=0, le=10_000)
    source: str
    assumption: bool = False


class Nic(Record):
    id: str
    name: str
    gbps: float = Field(gt=0)
    ports: int = Field(ge=1)
    power_w: float = Field(ge=0)
    price: Price
    source: str


class Switch(Record):
    id: str
    name: str
    ports: int = Field(ge=2)
    gbps: float = Field(gt=0)
    power_w: float = Field(ge=0)
    price: Price
    source: str


class Cable(Record):
    """One link of a fabric, everything it needs: cable or fibre and the transceiver at each end."""

    id: str
    name: str
    gbps: float = Field(gt=0)
    power_w: float = Field(ge=0)  # both ends together
    price: Price
    source: str


class Fabric(Record):
    id: str
    name: str
    nic: str | None
    nics_per_server: int = Field(default=0, ge=0, le=16)
    ports_per_server: int | None = Field(default=None, ge=1)
    port_gbps: float | None = Field(default=None, gt=0)
    switch: str
    server_cable: str | None = None  # one per server port, server to leaf (None: nothing to buy)
    switch_cable: str | None = None  # one per leaf uplink, leaf to spine
    efficiency: float = Field(gt=0, le=1)
    latency_us: float = Field(ge=0)
    source: str
    assumption: bool = False


class ModelPreset(Record):
    id: str
    name: str
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    ffn_hidden: int = Field(ge=1)
    vocab: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    mlp: Literal["gelu", "swiglu", "relu2"]
    experts: int = Field(default=0, ge=0)
    experts_active: int = Field(default=0, ge=0)
    shared_experts: int = Field(default=0, ge=0)
    expert_ffn_hidden: int = Field(default=0, ge=0)
    dense_layers: int = Field(default=0, ge=0)
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_dim: int = Field(default=0, ge=0)
    qk_nope_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
    head_dim: int = Field(default=0, ge=0)  # 0: hidden // heads
    tie_embeddings: bool | None = None  # None: tied for gelu (GPT) blocks, untied for swiglu
    sliding_window: int = Field(default=0, ge=0)
    sliding_layers: int = Field(default=0, ge=0)
    published_params_b: float | None = None
    published_active_params_b: float | None = None
    source: str

    @model_validator(mode="after")
    def _moe_consistent(self) -> ModelPreset:
        if self.experts and not (0 < self.experts_active <= self.experts and self.expert_ffn_hidden > 0):
            raise ValueError("an MoE model needs 0 < experts_active <= experts and expert_ffn_hidden > 0")
        return self

    @model_validator(mode="after")
    def _windows_consistent(self) -> ModelPreset:
        if self.sliding_layers > self.layers or bool(self.sliding_layers) != bool(self.sliding_window):
            raise ValueError("sliding_layers (at most layers) and sliding_window go together")
        return self

    def spec(self) -> ModelSpec:
        return ModelSpec(
            name=self.id, layers=self.layers, hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads,
            ffn_hidden=self.ffn_hidden, vocab=self.vocab, seq_len=self.seq_len, mlp=self.mlp, experts=self.experts,
            experts_active=self.experts_active, shared_experts=self.shared_experts,
            expert_ffn_hidden=self.expert_ffn_hidden, dense_layers=self.dense_layers, q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank, qk_rope_dim=self.qk_rope_dim, qk_nope_dim=self.qk_nope_dim,
            v_head_dim=self.v_head_dim, attn_head_dim=self.head_dim, tie_embeddings=self.tie_embeddings,
            sliding_window=self.sliding_window, sliding_layers=self.sliding_layers)


class Pue(Record):
    datacenter: Sourced
    other: Sourced


class RackFacts(Record):
    units: Sourced  # rack height in U
    usd: Sourced  # one rack, with PDUs and installation
    kw_air: Sourced  # IT power one air-cooled rack takes
    kw_liquid: Sourced
    floor_m2: Sourced  # floor area one rack needs, with its share of aisles


class Facility(Record):
    schema_version: int
    electricity_usd_per_kwh: Sourced
    pue: Pue
    amortisation_years: Sourced
    load_factor: Sourced
    maintenance_per_year: Sourced  # fraction of the hardware's catalog value per year
    colocation_usd_per_kw_month: Sourced
    racks: RackFacts

    @model_validator(mode="after")
    def _plausible(self) -> Facility:
        for name, pue in (("pue.datacenter", self.pue.datacenter), ("pue.other", self.pue.other)):
            if not 1.0 <= pue.value <= 3.0:
                raise ValueError(f"{name} must be between 1.0 and 3.0, got {pue.value}")
        if not 0 < self.load_factor.value <= 1:
            raise ValueError(f"load_factor must be in (0, 1], got {self.load_factor.value}")
        if self.amortisation_years.value <= 0:
            raise ValueError("amortisation_years must be positive")
        if self.maintenance_per_year.value > 1:
            raise ValueError(f"maintenance_per_year is a fraction of capex, got {self.maintenance_per_year.value}")
        if min(self.racks.units.value, self.racks.kw_air.value, self.racks.kw_liquid.value) <= 0:
            raise ValueError("racks.units, racks.kw_air and racks.kw_liquid must be positive")
        return self


class Region(Record):
    """A procurement region whose export rules allow only some parts (for example mainland China)."""

    id: str
    name: str
    allowed_gpus: tuple[str, ...]
    date: str
    source: str


class Offer(Record):
    """A cloud rental: GPUs of one type in instances shaped like a catalog server, on a fabric
    (None: instances are not networked for training across them). ``price.usd`` is per GPU-hour."""

    id: str
    provider: str
    name: str
    gpu: str
    server: str
    fabric: str | None = None
    gpus_per_instance: int = Field(ge=1, le=72)
    term: Literal["on-demand", "1yr", "3yr"]
    max_gpus: int | None = Field(default=None, ge=1)
    price: Price

    @property
    def term_hours(self) -> float:
        """Hours a committed term bills per GPU (0 for on-demand, billed by use)."""
        return {"on-demand": 0.0, "1yr": HOURS_PER_YEAR, "3yr": 3 * HOURS_PER_YEAR}[self.term]


QUANTILES = (5, 10, 20, 25, 50, 75, 80, 90, 95)
AT_BATCH, AT_MAX_LOAD = "at a batch", "at maximum load"  # serving band regimes


class Band(Record):
    """Quantiles of measured / predicted over the out-of-source comparisons of one workload kind."""

    rows: int = Field(ge=1)
    sources: int = Field(ge=1)
    source: str
    ratio_quantiles: dict[int, float]

    @model_validator(mode="after")
    def _complete(self) -> Band:
        missing = [q for q in QUANTILES if q not in self.ratio_quantiles]
        if missing:
            raise ValueError(f"ratio_quantiles needs the quantiles {list(QUANTILES)}; missing {missing}")
        values = [self.ratio_quantiles[q] for q in QUANTILES]
        if values != sorted(values) or values[0] <= 0:
            raise ValueError("ratio_quantiles must be positive and rise with the quantile")
        return self

    def ratio(self, quantile: int) -> float:
        return self.ratio_quantiles[quantile]


class BandPair(Record):
    calibrated: Band  # the GPU family and the stack have calibration rows of their own
    extrapolated: Band  # one of them borrows another's values: wider


class Bands(BandPair):
    widening: float = Field(default=1.0, ge=1.0)  # quantile levels stretched to cover 90 % out of source
    # serving: the bands of the rows measured at a batch, and at maximum load (bands.py)
    regimes: dict[Literal["at a batch", "at maximum load"], BandPair] = Field(default_factory=dict)


class UncertaintyFile(Record):
    schema_version: int
    training: Bands
    serving: Bands


class GpuFile(Record):
    schema_version: int
    prices_as_of: str
    spec_sources: dict[str, SpecSource]
    gpus: tuple[Gpu, ...]

    @model_validator(mode="after")
    def _specs_sourced(self) -> GpuFile:
        """Every numeric spec of every GPU names a dated document of ``spec_sources``."""
        errors = [InitErrorDetails(type=PydanticCustomError("unsourced_spec", message),
                                   loc=("gpus", i, "specs", name), input=gpu.specs.get(name, getattr(gpu, name, None)))
                  for i, gpu in enumerate(self.gpus) for name, message in gpu.spec_problems(self.spec_sources)]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


class ServerFile(Record):
    schema_version: int
    servers: tuple[Server, ...]


class NetworkFile(Record):
    schema_version: int
    links: tuple[LinkType, ...]
    nics: tuple[Nic, ...]
    switches: tuple[Switch, ...]
    fabrics: tuple[Fabric, ...]
    cables: tuple[Cable, ...] = ()


class ModelFile(Record):
    schema_version: int
    models: tuple[ModelPreset, ...]


class RegionFile(Record):
    schema_version: int
    regions: tuple[Region, ...]


class CloudFile(Record):
    schema_version: int
    offers: tuple[Offer, ...]


class TrainTraits(TypedDict):
    """What a training stack sets in a plan (``TrainPlan`` fields)."""

    grad_reduce_bytes: int
    flash_attention: bool


class ServeTraits(TypedDict):
    """What a serving engine sets in a replica's plan (``ServePlan`` fields)."""

    memory_fraction: float
    kv_fraction: float
    max_seqs: int
    reserved_memory: float
    fp16_accumulate: bool
    prefill_ubatch: int
    prefill_dequant: bool


@dataclass(frozen=True)
class Catalog:
    """Every catalog entry by id, cross-checked."""

    root: Path
    prices_as_of: str
    gpus: dict[str, Gpu]
    servers: dict[str, Server]
    links: dict[str, LinkType]
    nics: dict[str, Nic]
    switches: dict[str, Switch]
    fabrics: dict[str, Fabric]
    models: dict[str, ModelPreset]
    facility: Facility
    efficiency: Efficiency
    uncertainty: UncertaintyFile | None = None
    regions: dict[str, Region] = field(default_factory=dict)
    offers: dict[str, Offer] = field(default_factory=dict)
    cables: dict[str, Cable] = field(default_factory=dict)
    spec_sources: dict[str, SpecSource] = field(default_factory=dict)

    def band(self, kind: str, extrapolated: bool = False, regime: str | None = None) -> Band:
        """The out-of-source band of a workload kind ('train' or 'serve'); wider where the
        prediction's GPU family or stack has no calibration rows of its own. A serving prediction
        ``regime`` ("at a batch" or "at maximum load") takes the band of rows measured like it."""
        if self.uncertainty is None:
            raise CatalogError(f"{self.root}: no uncertainty.yaml. To fix: run 'gpuopt fit' and save its bands.")
        bands = self.uncertainty.training if kind in ("train", "training") else self.uncertainty.serving
        pair: BandPair = bands.regimes.get(regime, bands) if regime else bands  # type: ignore[call-overload]
        return pair.extrapolated if extrapolated else pair.calibrated

    def borrows(self, kind: str, stack: str | None, *runs: tuple[str, str]) -> bool:
        """Whether any (GPU, precision) pair (a weight format for serving) on a stack takes its
        efficiency values from another GPU family or stack: an extrapolated prediction."""
        return any(self.resolve(kind, gpu, precision, stack).extrapolated for gpu, precision in runs)

    def band_for(self, kind: str, stack: str | None, *runs: tuple[str, str], regime: str | None = None) -> Band:
        """The band of an answer that runs on (GPU, precision) pairs on a stack: the wider,
        extrapolated one if any of them borrows its efficiency values."""
        return self.band(kind, self.borrows(kind, stack, *runs), regime)

    def servers_for(self, gpu_id: str) -> list[Server]:
        return [s for s in self.servers.values() if gpu_id in s.accepts]

    def fabric_ports(self, fabric: Fabric) -> tuple[int, float]:
        """(switch ports used per server, Gb/s per port)."""
        if fabric.nic is None:
            return fabric.ports_per_server or 0, fabric.port_gbps or 0.0
        nic = self.nics[fabric.nic]
        return fabric.nics_per_server * nic.ports, nic.gbps

    def hardware(self, gpu_id: str, server_id: str, fabric_id: str | None) -> Hardware:
        """The SI view of a GPU in a server on a fabric, for the performance model."""
        gpu = self.gpus[gpu_id]
        server = self.servers[server_id]
        link = self.links[gpu.link]
        bus = self.links[gpu.host_bus]
        network = None
        if fabric_id is not None:
            fabric = self.fabrics[fabric_id]
            ports, gbps = self.fabric_ports(fabric)
            network = Link(fabric.id, ports * gbps / 8 * GB, fabric.efficiency, fabric.latency_us * 1e-6)
        return Hardware(
            device=self.device(gpu_id),
            gpus_per_node=server.slots,
            link=Link(link.id, gpu.link_bw_gbs / 2 * GB, link.efficiency, link.latency_us * 1e-6),
            link_domain=gpu.link_domain or server.slots,
            host_bus=Link(bus.id, _bus_gbs(bus.id) / 2 * GB, bus.efficiency, bus.latency_us * 1e-6),
            network=network,
        )

    def device(self, gpu_id: str) -> Device:
        gpu = self.gpus[gpu_id]
        peaks = tuple((p, tflops * 1e12) for p in ("bf16", "fp16", "fp8", "fp4", "fp16_acc16")
                      if (tflops := gpu.tflops(p)))
        return Device(gpu.id, gpu.memory_gb * GB, gpu.mem_bw_gbs * GB, peaks)

    @overload
    def stack(self, kind: Literal["train", "training"], ident: str | None, gpu_id: str) -> TrainStack: ...

    @overload
    def stack(self, kind: Literal["serve", "serving"], ident: str | None, gpu_id: str) -> Engine: ...

    @overload
    def stack(self, kind: str, ident: str | None, gpu_id: str) -> TrainStack | Engine: ...

    def stack(self, kind: str, ident: str | None, gpu_id: str) -> TrainStack | Engine:
        """A training stack or serving engine by id or alias; None: the default for the GPU's vendor."""
        kind_: Kind = "training" if kind in ("train", "training") else "serving"
        ident = ident or self.efficiency.default_stack(kind_, self.gpus[gpu_id].vendor)
        return self.efficiency.stack(kind_, ident)

    def resolve(self, kind: str, gpu_id: str, precision: str, stack: str | None) -> Resolved:
        """The efficiency parameters of a GPU at a (math) precision on a stack, and what they
        extrapolate; None: the GPU vendor's default stack."""
        kind_: Kind = "training" if kind in ("train", "training") else "serving"
        ident = self.stack(kind_, stack, gpu_id).id
        return self.efficiency.resolve(kind_, self.gpus[gpu_id].family, precision, ident)

    def efficiency_status(self, gpu_id: str) -> str:
        """Whether the GPU's family has calibration rows of its own, per workload kind."""
        family = self.gpus[gpu_id].family
        out = []
        for kind in ("training", "serving"):
            support = self.efficiency.table.support.get(kind)
            rows = support.families.get(family, 0) if support else 0
            if rows:
                out.append(f"{kind}: calibrated ({rows} rows of GPU family {family})")
            else:
                chain = self.efficiency.family_chain(family)[1:]
                borrowed = next((f for f in chain if support and support.families.get(f)), None)
                out.append(f"{kind}: NOT calibrated (no rows of GPU family {family}; "
                           + (f"takes {borrowed}'s values" if borrowed else "takes the defaults") + ", wider band)")
        return "; ".join(out)

    def train_params(self, gpu_id: str, precision: str, stack: str | None = None) -> TrainParams:
        params = self.resolve("training", gpu_id, precision, stack).params
        assert isinstance(params, TrainParams)  # a training stack resolves to training parameters
        return params

    def train_setup(self, gpu_id: str, precision: str = "bf16", stack: str | None = None) -> tuple[TrainParams, float]:
        """(efficiency parameters, bytes reserved per GPU): the arguments ``train_step`` takes after the plan."""
        return self.train_params(gpu_id, precision, stack), self.efficiency.reserved_memory

    def serve_params(self, gpu_id: str, weights: str, engine: str | None = None) -> ServeParams:
        """An engine's parameters for a GPU serving weights in a format (values are keyed by the weight
        format: a weight-only format dequantises into 16-bit math at its own efficiency)."""
        math_precision(self.device(gpu_id), weights)  # raises for a GPU with no tensor cores for it
        params = self.resolve("serving", gpu_id, weights, engine).params
        assert isinstance(params, ServeParams)  # a serving engine resolves to serving parameters
        return params

    def train_plan_traits(self, gpu_id: str, stack: str | None = None) -> TrainTraits:
        """What a training stack sets in a plan (TrainPlan fields)."""
        st = self.stack("training", stack, gpu_id)
        return {"grad_reduce_bytes": st.grad_reduce_bytes, "flash_attention": st.flash_attention}

    def serve_plan_traits(self, gpu_id: str, engine: str | None = None) -> ServeTraits:
        """What a serving engine sets in a replica's plan (ServePlan fields)."""
        e = self.stack("serving", engine, gpu_id)
        return {"memory_fraction": e.memory_fraction, "kv_fraction": e.kv_fraction,
                "max_seqs": e.seq_cap(self.gpus[gpu_id].memory_gb * GB, self.gpus[gpu_id].family),
                "reserved_memory": self.efficiency.reserved_memory, "fp16_accumulate": e.fp16_accumulate,
                "prefill_ubatch": e.prefill_ubatch, "prefill_dequant": e.prefill_dequant}


def _bus_gbs(bus_id: str) -> float:
    """PCIe x16 bandwidth, both directions together (PCIe 3/4/5: 32/64/128 GB/s)."""
    return {"pcie3": 32.0, "pcie4": 64.0, "pcie3-no-p2p": 32.0, "pcie4-no-p2p": 64.0, "pcie5": 128.0}.get(bus_id, 64.0)


def default_root() -> Path:
    """``$GPUOPT_CATALOGS`` or the ``catalogs/`` folder beside the package."""
    env = os.environ.get("GPUOPT_CATALOGS")
    return Path(env) if env else Path(__file__).resolve().parent.parent.parent / "catalogs"


R = TypeVar("R", bound=Record)


class _Identified(Protocol):
    """A catalog entry with an id (a GPU, a server, a fabric, ...)."""

    @property
    def id(self) -> str: ...


E = TypeVar("E", bound=_Identified)


def _load(root: Path, name: str, schema: type[R]) -> R:
    path = root / name
    data = read_yaml(path, CatalogError)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CatalogError(f"{path}: schema_version is {version!r}; this gpuopt reads {SCHEMA_VERSION}. "
                           "To fix: set 'schema_version: 1'.")
    return validate(schema, data, path, CatalogError)


def _index(path: Path, kind: str, items: tuple[E, ...]) -> dict[str, E]:
    table: dict[str, E] = {}
    for item in items:
        ident = item.id
        if ident in table:
            raise CatalogError(f"{path}: {kind} id '{ident}' appears twice. To fix: give each entry its own id.")
        table[ident] = item
    return table


def load_catalog(root: Path | None = None) -> Catalog:
    """Load every catalog file under ``root`` and check the references between them."""
    root = Path(root) if root else default_root()
    gpus_f = _load(root, "gpus.yaml", GpuFile)
    servers_f = _load(root, "servers.yaml", ServerFile)
    net_f = _load(root, "network.yaml", NetworkFile)
    models_f = _load(root, "models.yaml", ModelFile)
    facility = _load(root, "facility.yaml", Facility)
    bands = _load(root, "uncertainty.yaml", UncertaintyFile)
    regions = _load(root, "regions.yaml", RegionFile)
    cloud = _load(root, "cloud.yaml", CloudFile)
    cat = Catalog(
        root=root,
        prices_as_of=gpus_f.prices_as_of,
        gpus=_index(root / "gpus.yaml", "gpu", gpus_f.gpus),
        servers=_index(root / "servers.yaml", "server", servers_f.servers),
        links=_index(root / "network.yaml", "link", net_f.links),
        nics=_index(root / "network.yaml", "nic", net_f.nics),
        switches=_index(root / "network.yaml", "switch", net_f.switches),
        fabrics=_index(root / "network.yaml", "fabric", net_f.fabrics),
        models=_index(root / "models.yaml", "model", models_f.models),
        facility=facility,
        efficiency=load_efficiency(root),
        uncertainty=bands,
        regions=_index(root / "regions.yaml", "region", regions.regions),
        offers=_index(root / "cloud.yaml", "offer", cloud.offers),
        cables=_index(root / "network.yaml", "cable", net_f.cables),
        spec_sources=dict(gpus_f.spec_sources),
    )
    _check_references(cat)
    _check_efficiency_keys(cat)
    return cat


def _ref(path: Path, owner: str, field: str, ident: str | None, table: Mapping[str, Record]) -> None:
    if ident is not None and ident not in table:
        raise CatalogError(f"{path}: {owner}: field '{field}' names unknown id '{ident}'.{suggest(ident, table)}")


def _check_references(cat: Catalog) -> None:
    for gpu in cat.gpus.values():
        _ref(cat.root / "gpus.yaml", f"gpu '{gpu.id}'", "link", gpu.link, cat.links)
        _ref(cat.root / "gpus.yaml", f"gpu '{gpu.id}'", "host_bus", gpu.host_bus, cat.links)
    for server in cat.servers.values():
        for g in server.accepts:
            _ref(cat.root / "servers.yaml", f"server '{server.id}'", "accepts", g, cat.gpus)
        for f in server.fabrics:
            _ref(cat.root / "servers.yaml", f"server '{server.id}'", "fabrics", f, cat.fabrics)
    for fabric in cat.fabrics.values():
        path = cat.root / "network.yaml"
        _ref(path, f"fabric '{fabric.id}'", "nic", fabric.nic, cat.nics)
        _ref(path, f"fabric '{fabric.id}'", "switch", fabric.switch, cat.switches)
        _ref(path, f"fabric '{fabric.id}'", "server_cable", fabric.server_cable, cat.cables)
        _ref(path, f"fabric '{fabric.id}'", "switch_cable", fabric.switch_cable, cat.cables)
        if fabric.nic is None and not (fabric.ports_per_server and fabric.port_gbps):
            raise CatalogError(f"{path}: fabric '{fabric.id}': without a nic it needs ports_per_server and port_gbps.")
        if fabric.nic is not None and fabric.nics_per_server < 1:
            raise CatalogError(f"{path}: fabric '{fabric.id}': field 'nics_per_server' must be at least 1.")
    for region in cat.regions.values():
        for g in region.allowed_gpus:
            _ref(cat.root / "regions.yaml", f"region '{region.id}'", "allowed_gpus", g, cat.gpus)
    for offer in cat.offers.values():
        path, owner = cat.root / "cloud.yaml", f"offer '{offer.id}'"
        _ref(path, owner, "gpu", offer.gpu, cat.gpus)
        _ref(path, owner, "server", offer.server, cat.servers)
        _ref(path, owner, "fabric", offer.fabric, cat.fabrics)
        server = cat.servers[offer.server]
        if offer.gpu not in server.accepts or offer.gpus_per_instance > server.slots:
            raise CatalogError(f"{path}: {owner}: server '{offer.server}' does not hold {offer.gpus_per_instance} x "
                               f"'{offer.gpu}'. To fix: name a server whose 'accepts' lists the GPU.")


def _check_efficiency_keys(cat: Catalog) -> None:
    """Every value in efficiency.yaml is keyed by a GPU family the catalog knows (a GPU's, or one
    that takes another's values) and a precision the kind has; every support count likewise."""
    path, table = cat.root / "efficiency.yaml", cat.efficiency.table
    families = {g.family for g in cat.gpus.values()} | set(table.families) | set(table.families.values())
    kinds = (("training", table.training, PRECISIONS, cat.efficiency.stacks),
             ("serving", table.serving, SERVE_PRECISIONS, cat.efficiency.engines))
    for kind, params, precisions, stacks in kinds:
        keys = [(f"{kind}.{name}.hardware", key) for name, p in params.items() for key in p.hardware]
        support = table.support.get(kind)  # type: ignore[call-overload]
        keys += [(f"support.{kind}.families", key) for key in (support.families if support else ())]
        for key in support.stacks if support else ():
            if key not in stacks:
                raise CatalogError(f"{path}: support.{kind}.stacks: '{key}' is not in stacks.yaml."
                                   f"{suggest(key, stacks)} To fix: run 'gpuopt fit' to recount the rows.")
        for where, key in keys:
            family, _, precision = key.partition("/")
            if family not in families:
                raise CatalogError(f"{path}: {where}: '{key}' names unknown GPU family '{family}'."
                                   f"{suggest(family, families)} Known: {', '.join(sorted(families))}.")
            if precision and precision not in precisions:
                raise CatalogError(f"{path}: {where}: '{key}' names unknown {kind} precision '{precision}'."
                                   f"{suggest(precision, precisions)} Known: {', '.join(precisions)}.")


PRICED = ("gpus", "servers", "nics", "switches", "cables", "offers")  # the catalog tables whose entries carry a price
PricedEntry = Gpu | Server | Nic | Switch | Cable | Offer  # an entry of one of those tables


def priced_item(cat: Catalog, item_id: str) -> tuple[str, PricedEntry]:
    """(table, entry) of the priced catalog entry ``item_id``; CatalogError with a suggestion if none."""
    for table in PRICED:
        if item_id in getattr(cat, table):
            return table, getattr(cat, table)[item_id]
    ids = [i for table in PRICED for i in getattr(cat, table)]
    raise CatalogError(f"no GPU, server, NIC, switch, cable or cloud offer '{item_id}' in the catalog."
                       f"{suggest(item_id, ids)} To fix: use an id from 'gpuopt catalog list'.")


def with_price(cat: Catalog, item_id: str, usd: float, note: str, date: str | None = None) -> Catalog:
    """The catalog with one entry's price replaced (a quote, a discount or a what-if scenario);
    ``note`` says where the new figure comes from and is kept as its source."""
    table, item = priced_item(cat, item_id)
    update = {"usd": usd, "source": note, "assumption": False, "override": True}
    if date is not None:
        update["date"] = date
    price = item.price.model_copy(update=update)
    entries = dict(getattr(cat, table))
    entries[item_id] = item.model_copy(update={"price": price})
    changes: dict[str, Any] = {table: entries}  # the field named by ``table``: a dict of that table's entries
    return replace(cat, **changes)
