"""The catalog's records: frozen pydantic models of the YAML files under catalogs/ (GPUs, servers,
links, NICs, switches, cables, fabrics, facility, export regions, uncertainty
bands; cloud offers are in ``offers``, model presets in ``model_records``), every figure with its
source and date, units in the field names."""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from optimizer.errors import suggest
from optimizer.perf.goodput import Reliability

SCHEMA_VERSION = 1
GB = 1e9
GIB = 2.0**30  # GPU memory is sold in GiB: nvidia-smi shows an H100 80GB's as 81,559 MiB (gpus.yaml)
HOURS_PER_YEAR = 8766.0  # 365.25 days


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(Record):
    usd: float = Field(ge=0)
    date: str
    source: str
    assumption: bool = False
    override: bool = False  # set by a price book or --price, not read from a catalog file
    condition: Literal["new", "used"] = "new"  # used: a second-hand or refurbished unit's market price


class Sourced(Record):
    value: float = Field(ge=0)
    date: str | None = None
    source: str
    assumption: bool = False


GpuFamily = Literal["volta", "turing", "ampere", "ampere-ga10x", "ada", "hopper", "blackwell", "blackwell-gb20x",
                    "cdna2", "cdna3", "cdna4", "gaudi2", "gaudi3"]
GPU_FAMILIES: tuple[str, ...] = get_args(GpuFamily)
# The numeric specs of a GPU entry; each one present needs a source in the entry's ``specs`` map.
SPEC_FIELDS = ("memory_gb", "ecc_reserved", "mem_bw_gbs", "bf16_tflops", "fp16_tflops", "fp16_acc16_tflops",
               "fp8_tflops", "fp4_tflops", "mamf_bf16_tflops", "mamf_fp8_tflops", "link_bw_gbs", "tdp_w")


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
    memory_gb: float = Field(gt=0, le=4096)  # as the vendor states it: binary gigabytes (GiB)
    # share of the memory a GDDR card holds back for ECC when ECC is on, as data-centre cards ship
    # (nvidia-smi shows 23,028 of 24,576 MiB on an A10 and 46,068 of 49,152 on an L40S: 1/16)
    ecc_reserved: float | None = Field(default=None, ge=0, le=0.25)
    mem_bw_gbs: float = Field(gt=0, le=100_000)
    bf16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    fp16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    fp8_tflops: float | None = Field(default=None, gt=0, le=100_000)
    fp4_tflops: float | None = Field(default=None, gt=0, le=100_000)  # dense FP4 / NVFP4 / MXFP4
    # FP16 tensor math with FP16 accumulation, where it runs faster than with FP32 accumulation
    # (GeForce cards: twice the rate); the 16-bit figures above are FP32-accumulate
    fp16_acc16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    # measured Maximum Achievable Matmul FLOPS (stas00's MAMF table): the most a GEMM reached on the part
    mamf_bf16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    mamf_fp8_tflops: float | None = Field(default=None, gt=0, le=100_000)
    link: str
    link_bw_gbs: float = Field(gt=0, le=100_000)
    link_domain: int | None = Field(default=None, ge=1)
    host_bus: str
    tdp_w: float = Field(gt=0, le=10_000)
    datacenter_license: bool
    purchasable: bool = True  # False: kept for calibration; offered only when a problem lists it in allow_gpus
    price: Price  # new (the last new price, where sold_new is false)
    sold_new: bool = True  # False: end of life, no longer sold new; bought used only (hardware.allow_used)
    # second-hand or refurbished, bought only where a problem sets hardware.allow_used: true
    used_price: Price | None = None
    specs: dict[str, str]  # numeric spec (memory_gb, bf16_tflops, ...) -> key of the file's spec_sources
    source: str
    note: str | None = None

    @model_validator(mode="after")
    def _has_a_precision(self) -> Gpu:
        if not (self.bf16_tflops or self.fp16_tflops or self.fp8_tflops):
            raise ValueError("needs at least one of bf16_tflops, fp16_tflops, fp8_tflops")
        return self

    @property
    def memory_bytes(self) -> float:
        """Memory a program can use, in bytes: the stated GiB less what ECC holds back."""
        return self.memory_gb * GIB * (1.0 - (self.ecc_reserved or 0.0))

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
    mesh: bool = False  # point-to-point links to every peer of the domain (no switch): ``Hardware.mesh``

    @property
    def x16_gbs(self) -> float:
        """As a host bus: PCIe x16 both ways together, of the generation the id starts with (3/4/5:
        32/64/128 GB/s; ``pcie4-no-p2p`` and ``pcie4-g5`` are PCIe 4.0 links that move data differently)."""
        return {"pcie3": 32.0, "pcie4": 64.0, "pcie5": 128.0}.get(self.id.split("-")[0], 64.0)


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


class Pue(Record):
    datacenter: Sourced
    other: Sourced


class RackFacts(Record):
    units: Sourced  # rack height in U
    usd: Sourced  # one rack, with PDUs and installation
    kw_air: Sourced  # IT power one air-cooled rack takes
    kw_liquid: Sourced
    floor_m2: Sourced  # floor area one rack needs, with its share of aisles


class ReliabilityFacts(Record):
    """What interrupts a training job and what recovering costs (optimizer.perf.goodput)."""
    interruptions_per_gpu_day: Sourced
    checkpoint_minutes: Sourced  # writing one checkpoint, the job paused
    restart_minutes: Sourced  # detecting a failure, replacing the node, reloading the checkpoint
    spot_interruptions_per_gpu_day: Sourced  # spot capacity reclaimed by its provider

    def reliability(self, interruptions_per_gpu_day: float | None = None, checkpoint_minutes: float | None = None,
                    restart_minutes: float | None = None) -> Reliability:
        """These facts as the model's record, each overridden where a value is given."""
        given = (interruptions_per_gpu_day, checkpoint_minutes, restart_minutes)
        facts = (self.interruptions_per_gpu_day, self.checkpoint_minutes, self.restart_minutes)
        rate, checkpoint, restart = (f.value if g is None else g for g, f in zip(given, facts, strict=True))
        source = "the problem's goodput" if given[0] is not None else facts[0].source.split(":")[0]
        return Reliability(rate, checkpoint * 60.0, restart * 60.0, self.spot_interruptions_per_gpu_day.value, source)


class Facility(Record):
    schema_version: int
    electricity_usd_per_kwh: Sourced
    pue: Pue
    amortisation_years: Sourced
    load_factor: Sourced
    maintenance_per_year: Sourced  # fraction of the hardware's catalog value per year
    colocation_usd_per_kw_month: Sourced
    racks: RackFacts
    reliability: ReliabilityFacts

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


QUANTILES = (5, 10, 20, 25, 50, 75, 80, 90, 95)
AT_BATCH, AT_MAX_LOAD = "at a batch", "at maximum load"  # serving band regimes
DENSE, MOE = "dense", "mixture of experts"  # training band regimes: MoE steps are predicted far less well
BandRegime = Literal["at a batch", "at maximum load", "dense", "mixture of experts"]


def train_regime(moe: bool) -> str:
    """The band regime of a training prediction: a mixture-of-experts model's or a dense one's."""
    return MOE if moe else DENSE


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


class VendorBands(Record):
    # one GPU vendor's bands per regime (serving: at a batch, at maximum load; training: dense, MoE)
    regimes: dict[BandRegime, BandPair] = Field(default_factory=dict)


class Bands(BandPair):
    # each quantile's log distance from the median stretched to cover 90 % out of source, a factor per
    # group ("calibrated", "extrapolated") and per regime and group ("at a batch/calibrated"; bands.py)
    widening: dict[str, Annotated[float, Field(ge=1.0)]] = Field(default_factory=dict)
    # the bands per regime (bands.py): serving at a batch and at maximum load; training dense and MoE
    regimes: dict[BandRegime, BandPair] = Field(default_factory=dict)
    vendors: dict[str, VendorBands] = Field(default_factory=dict)  # the same per GPU vendor (bands.py)
