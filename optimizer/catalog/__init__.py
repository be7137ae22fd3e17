"""Stage 1: load and validate the hardware, network, power and price catalogs.

Catalog files are YAML with units in their keys (``memory_gb``, ``mem_bw_gbs``,
``bf16_tflops``); records are frozen pydantic models, and ``Catalog.hardware`` converts a
GPU in a server on a fabric to the SI ``perf.Hardware`` the performance model uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal, Protocol, TypeVar, overload

from optimizer.catalog.efficiency_table import Ceiling
from optimizer.catalog.files import CloudFile, GpuFile, ModelFile, NetworkFile, RegionFile, ServerFile, UncertaintyFile
from optimizer.catalog.matmul import achievable_shares
from optimizer.catalog.model_records import ModelPreset
from optimizer.catalog.offers import Offer
from optimizer.catalog.prices import PRICED, PricedEntry, priced_item, with_price, with_used_prices
from optimizer.catalog.records import (  # re-exported: the records are part of the catalog's surface
    AT_BATCH,
    AT_MAX_LOAD,
    GB,
    GPU_FAMILIES,
    HOURS_PER_YEAR,
    QUANTILES,
    SCHEMA_VERSION,
    SPEC_FIELDS,
    Band,
    BandPair,
    Bands,
    Cable,
    Fabric,
    Facility,
    Gpu,
    GpuFamily,
    LinkType,
    Nic,
    Price,
    Pue,
    RackFacts,
    Record,
    Region,
    Server,
    Sourced,
    SpecSource,
    Switch,
)
from optimizer.catalog.stacks import (
    Efficiency,
    Engine,
    Kind,
    Resolved,
    ServeTraits,
    TrainStack,
    TrainTraits,
    efficiency_precision,
    load_efficiency,
)
from optimizer.errors import CatalogError, suggest
from optimizer.perf.params import ServeParams, TrainParams
from optimizer.perf.serve import math_precision
from optimizer.perf.specs import Device, Hardware, Link
from optimizer.validation import read_yaml, validate

__all__ = [
    "PricedEntry", "AT_BATCH", "AT_MAX_LOAD", "Band", "BandPair", "Bands", "Cable", "Catalog", "CloudFile",
    "default_root", "Fabric", "Facility", "GB", "Gpu", "GPU_FAMILIES", "GpuFamily", "GpuFile", "HOURS_PER_YEAR",
    "LinkType", "load_catalog", "ModelFile", "ModelPreset", "NetworkFile", "Nic", "Offer", "Price", "PRICED",
    "priced_item", "Pue", "QUANTILES", "RackFacts", "Record", "Region", "RegionFile", "SCHEMA_VERSION", "Server",
    "ServerFile", "ServeTraits", "Sourced", "SPEC_FIELDS", "SpecSource", "Switch", "TrainTraits", "UncertaintyFile",
    "with_price", "with_used_prices",
]


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

    def band(self, kind: str, extrapolated: bool = False, regime: str | None = None,
             vendor: str | None = None) -> Band:
        """The out-of-source band of a workload kind ('train' or 'serve'); wider where the prediction's
        GPU family or stack has no calibration rows of its own. A ``regime`` (serving: at a batch or at
        maximum load; training: dense or MoE, ``records.train_regime``) takes the band of rows measured
        like it, on its GPU ``vendor``'s rows where the bands keep them apart."""
        if self.uncertainty is None:
            raise CatalogError(f"{self.root}: no uncertainty.yaml. To fix: run 'gpuopt fit' and save its bands.")
        bands = self.uncertainty.training if kind in ("train", "training") else self.uncertainty.serving
        pair: BandPair = bands.regimes.get(regime, bands) if regime else bands  # type: ignore[call-overload]
        if regime and vendor in bands.vendors:
            pair = bands.vendors[vendor].regimes.get(regime, pair)  # type: ignore[call-overload]
        return pair.extrapolated if extrapolated else pair.calibrated

    def vendor_of(self, *gpus: str) -> str | None:
        """The one vendor of these GPUs; None if they are several."""
        return vendors.pop() if len(vendors := {self.gpus[g].vendor for g in gpus}) == 1 else None

    def borrows(self, kind: str, stack: str | None, *runs: tuple[str, str]) -> bool:
        """Whether any (GPU, precision) pair (a weight format for serving) on a stack takes its
        efficiency values from another GPU family or stack: an extrapolated prediction."""
        return any(self.resolve(kind, gpu, precision, stack).extrapolated for gpu, precision in runs)

    def band_for(self, kind: str, stack: str | None, *runs: tuple[str, str], regime: str | None = None) -> Band:
        """The band of an answer that runs on (GPU, precision) pairs on a stack: the wider,
        extrapolated one if any of them borrows its efficiency values."""
        return self.band(kind, self.borrows(kind, stack, *runs), regime, self.vendor_of(*(gpu for gpu, _ in runs)))

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
            link_domain=gpu.link_domain or server.slots, mesh=link.mesh,
            host_bus=Link(bus.id, bus.x16_gbs / 2 * GB, bus.efficiency, bus.latency_us * 1e-6),
            network=network,
        )

    def device(self, gpu_id: str) -> Device:
        gpu = self.gpus[gpu_id]
        peaks = tuple((p, tflops * 1e12) for p in ("bf16", "fp16", "fp8", "fp4", "fp16_acc16")
                      if (tflops := gpu.tflops(p)))
        return Device(gpu.id, gpu.memory_bytes, gpu.mem_bw_gbs * GB, peaks, self.matmul_shares[gpu_id])

    @cached_property
    def matmul_shares(self) -> dict[str, tuple[tuple[str, float], ...]]:
        """Each GPU's measured matmul share of its peaks (``matmul.achievable_shares``), once per catalog."""
        return achievable_shares(self.gpus)

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

    def _ceiling_source(self, gpu_id: str, precision: str) -> tuple[Ceiling, str, str] | None:
        """(ceiling, family, precision it was measured at; family "least:<f>" or "" for the default)."""
        table = self.efficiency.table.mfu_ceiling
        if table is None:
            return None
        precision = efficiency_precision(precision)  # BF16 and FP16: one tensor rate, one ceiling
        for family in self.efficiency.family_chain(self.gpus[gpu_id].family):
            if (c := table.hardware.get(f"{family}/{precision}")) is not None:
                return c, family, precision
        same = sorted((c.value, k.split("/")[0]) for k, c in table.hardware.items() if k.endswith(f"/{precision}"))
        return (table.hardware[f"{same[0][1]}/{precision}"], f"least:{same[0][1]}", precision) if same \
            else (table.default, "", precision)

    def mfu_ceiling(self, gpu_id: str, precision: str) -> Ceiling | None:
        """The highest MFU dense runs reached on the GPU's family at ``precision`` (FP16 and BF16 as one),
        else on the family it borrows from, else the lowest of any family's; None without a guard."""
        return found[0] if (found := self._ceiling_source(gpu_id, precision)) else None

    def mfu_ceiling_scope(self, gpu_id: str, precision: str) -> str:
        """Where ``mfu_ceiling`` comes from, in words."""
        family, (_, source, at) = self.gpus[gpu_id].family, self._ceiling_source(gpu_id, precision) or (0, "", "")
        if source == family:
            return f"on its GPU family ({family}) at {at}"
        missing = f"too few published {family} {precision} runs for one of its own"
        if source.startswith("least:"):
            return f"on {source[6:]}, the lowest of the GPU families with runs of their own at {at} ({missing})"
        if source:
            return f"on {source}, whose efficiencies {family} borrows, at {at} ({missing})"
        return f"on any GPU family ({missing})"

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
                "max_seqs": e.seq_cap(self.gpus[gpu_id].memory_bytes, self.gpus[gpu_id].family),
                "reserved_memory": self.efficiency.reserved_memory, "fp16_accumulate": e.fp16_accumulate,
                "prefill_ubatch": e.prefill_ubatch, "prefill_dequant": e.prefill_dequant,
                "kv_on_demand": e.kv_on_demand, "paged_v1v2": e.paged_v1v2,
                "overlap_scheduler": e.overlap_scheduler, "mixed_batching": e.mixed_batching}


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
    that takes another's values; ``stacks.load_efficiency`` checks the precisions); every support
    count likewise."""
    path, table = cat.root / "efficiency.yaml", cat.efficiency.table
    families = {g.family for g in cat.gpus.values()} | set(table.families) | set(table.families.values())
    kinds = (("training", table.training, cat.efficiency.stacks), ("serving", table.serving, cat.efficiency.engines))
    for kind, params, stacks in kinds:
        keys = [(f"{kind}.{name}.hardware", key) for name, p in params.items() for key in p.hardware]
        support = table.support.get(kind)  # type: ignore[call-overload]
        keys += [(f"support.{kind}.families", key) for key in (support.families if support else ())]
        for key in support.stacks if support else ():
            if key not in stacks:
                raise CatalogError(f"{path}: support.{kind}.stacks: '{key}' is not in stacks.yaml."
                                   f"{suggest(key, stacks)} To fix: run 'gpuopt fit' to recount the rows.")
        for where, key in keys:
            if (family := key.partition("/")[0]) not in families:
                raise CatalogError(f"{path}: {where}: '{key}' names unknown GPU family '{family}'."
                                   f"{suggest(family, families)} Known: {', '.join(sorted(families))}.")
