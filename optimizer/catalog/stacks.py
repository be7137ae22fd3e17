"""Software stacks, inference engines and the efficiency parameters fitted for them.

``catalogs/stacks.yaml`` says what each training stack and serving engine does (traits from its
documentation: how it reduces gradients, how much memory it gives the KV cache, how many
sequences it keeps in flight) and which one is today's mainstream choice per GPU vendor.
``catalogs/efficiency.yaml`` holds the performance model's parameters (``perf.params``), fitted by
``gpuopt fit`` to published runs: for each parameter a default, values per GPU family (and
precision) and values or multipliers per stack, each with the rows and sources behind it.

Resolution takes the most specific value there is: ``family/precision``, then ``family``, then the
family it is ``like`` (a GPU family or stack with no rows of its own), then the default. Every
step down that chain is an extrapolation, and ``Resolved.extrapolated`` names it so that bands
can widen (``optimizer.calibration.bands``). An earlier release of an engine (``earlier_release``)
that reads a host overhead (``release_trend``) from the engine it precedes takes it times
``release_overhead`` per release between them: the ratio the fitted release pairs show (vLLM 0.6.0
cut the CPU overheads of 0.5's scheduler and API server, vLLM blog, 2024-09-05).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from pydantic import Field, model_validator

from optimizer.catalog.efficiency_table import EfficiencyFile, Kind, Parameter, Record, Support
from optimizer.catalog.records import GPU_FAMILIES
from optimizer.errors import CatalogError, suggest
from optimizer.perf.params import ServeParams, TrainParams
from optimizer.perf.specs import PRECISIONS, SERVE_PRECISIONS
from optimizer.validation import read_yaml, validate

# BF16 and FP16 are one tensor-core rate running the same kernels (every GPU in gpus.yaml that has both
# lists the same dense TFLOPS, Gaudi 3 apart): their efficiency values, each a fraction of its own
# precision's peak, are one value stored under bf16. Kept apart, FP16-only sources (LLM-Inference-Bench)
# and BF16-only ones of the same stack each had a value of their own: out of source, serving 19.2 % /
# 96.0 % (median / p90 |error|) against 18.2 % / 89.8 % merged; training 9.9 % / 24.7 % against 9.1 % / 23.2 %.
SAME_RATE = {"fp16": "bf16"}


def efficiency_precision(precision: str) -> str:
    """The precision an efficiency value of ``precision`` is stored under (``SAME_RATE``)."""
    return SAME_RATE.get(precision, precision)


class TrainStack(Record):
    id: str
    name: str
    aliases: tuple[str, ...] = ()
    like: str | None = None  # the stack whose parameters it takes where it has none of its own
    grad_reduce_bytes: int = Field(default=4, ge=1, le=4)
    flash_attention: bool = True
    traits: str  # what the stack overlaps and fuses, from its documentation
    source: str


class Engine(Record):
    id: str
    name: str
    aliases: tuple[str, ...] = ()
    like: str | None = None
    memory_fraction: float = Field(default=1.0, gt=0, le=1)  # share of the GPU's memory the engine takes
    kv_fraction: float = Field(default=0.9, gt=0, le=1)  # share of what is left after weights for the KV cache
    max_seqs: int = Field(default=0, ge=0)  # sequences in flight at most (0: only memory limits)
    max_seqs_large: int = Field(default=0, ge=0)  # the cap on GPUs of 70 GiB or more other than the A100
    fp16_accumulate: bool = False  # its 16-bit GEMMs accumulate in FP16 (faster on GeForce cards)
    prefill_ubatch: int = Field(default=0, ge=0)  # tokens per pipelined micro-batch of a prompt (0: none)
    prefill_dequant: bool = False  # prompt GEMMs of weight-only formats dequantise into a 16-bit copy first
    kv_on_demand: bool = False  # KV blocks are taken as tokens are generated, not reserved for the whole request
    paged_v1v2: bool = False  # decode attention by vLLM's generic PagedAttention V1/V2 kernels and their switch
    overlap_scheduler: bool = False  # the host prepares the next decode step while the GPU runs this one
    mixed_batching: bool = False  # new prompts are prefilled inside the decode step's forward pass
    # an earlier release of the engine it is ``like``: where it has no host overheads of its own it takes
    # that engine's times ``EfficiencyFile.release_overhead`` (``Efficiency.release_hops``)
    earlier_release: bool = False
    traits: str
    source: str

    @model_validator(mode="after")
    def _release_of(self) -> Engine:
        if self.earlier_release and not self.like:
            raise ValueError(f"{self.id}: earlier_release needs 'like', the engine it is an earlier release of")
        return self

    def seq_cap(self, memory_bytes: float, family: str) -> int:
        """The engine's default cap on sequences in flight on a GPU."""
        if self.max_seqs_large and memory_bytes >= 70 * 2**30 and family != "ampere":
            return self.max_seqs_large
        return self.max_seqs


class StacksFile(Record):
    schema_version: int
    defaults: dict[Kind, dict[str, str]]  # kind → GPU vendor → stack id
    training: tuple[TrainStack, ...]
    serving: tuple[Engine, ...]


@dataclass(frozen=True)
class Resolved:
    """Parameters for one context, and where each came from."""

    params: TrainParams | ServeParams
    keys: tuple[tuple[str, str, str], ...]  # (parameter, hardware key or "default", stack key or "")
    extrapolated: tuple[str, ...]  # what had no calibration rows of its own ("gpu family cdna4", ...)


@dataclass(frozen=True)
class Efficiency:
    """The efficiency table with the stacks it is keyed by."""

    table: EfficiencyFile
    stacks: dict[str, TrainStack]
    engines: dict[str, Engine]
    defaults: dict[str, dict[str, str]]
    reserved_memory: float  # bytes
    memory_headroom: float = 0.0  # share of each GPU's memory a training plan leaves free (fragmentation)

    def stack(self, kind: Kind, ident: str) -> TrainStack | Engine:
        """A stack or engine by id or alias."""
        table = self.stacks if kind == "training" else self.engines
        if ident in table:
            return table[ident]
        for entry in table.values():
            if ident in entry.aliases:
                return entry
        names = sorted(table) + sorted(a for e in table.values() for a in e.aliases)
        what = "training stack" if kind == "training" else "serving engine"
        raise CatalogError(f"unknown {what} '{ident}'.{suggest(ident, names)} Known: {', '.join(sorted(table))}.")

    def default_stack(self, kind: Kind, vendor: str) -> str:
        choices = self.defaults.get(kind, {})
        if vendor not in choices:
            raise CatalogError(f"stacks.yaml: no default {kind} stack for {vendor} GPUs. To fix: add "
                               f"'{vendor}: <id>' under defaults.{kind}, or name one with stack/engine.")
        return choices[vendor]

    def chain(self, kind: Kind, ident: str) -> list[str]:
        """The stack and those it is like, most specific first."""
        table = self.stacks if kind == "training" else self.engines
        out: list[str] = []
        while ident and ident not in out:
            out.append(ident)
            ident = table[ident].like or ""
        return out

    def release_hops(self, kind: Kind, stack: str, key: str) -> int:
        """Earlier releases the ``like`` chain passes from ``stack`` to the engine of the value ``key`` it
        reads (``vllm-rocm-0.6.1`` reading ``vllm-rocm``: two; ``tgi``, like ``vllm-0.5``, reading ``vllm``:
        one, vLLM 0.5's); every one in the chain for the default (``key`` empty), which stands for the
        chain's root; none for a training stack or a value of the stack itself."""
        if kind != "serving":
            return 0
        owner = key.partition("@")[0]
        chain = self.chain(kind, stack)
        if owner and owner not in chain:
            raise ValueError(f"{stack} does not read values of {owner}: its chain is {' → '.join(chain)}")
        hops = 0
        for ident in chain:
            if ident == owner:
                break
            hops += int(self.engines[ident].earlier_release)
        return hops

    def release_factor(self, kind: Kind, param: Parameter, stack: str, key: str) -> float:
        """What ``param``'s value read under ``key`` is multiplied by for ``stack`` (``release_hops``)."""
        ratio = self.table.release_overhead
        if not param.release_trend or ratio is None:
            return 1.0
        return ratio.value ** self.release_hops(kind, stack, key)

    def family_chain(self, family: str) -> list[str]:
        out: list[str] = []
        while family and family not in out:
            out.append(family)
            family = self.table.families.get(family, "")
        return out

    def stack_keys(self, kind: Kind, stack: str, family: str, per_family: bool, precision: str = "") -> list[str]:
        """Keys a stack value may be stored under, most specific first: for each stack in the
        chain, the stack on the GPU family and the families it is like (``trtllm@hopper``: an
        engine's kernels are written per architecture, so how close it comes to the hardware's
        rate differs by family, e.g. TensorRT-LLM's Hopper FP8 GEMMs and XQA attention), then the
        stack alone. ``per_family`` is false for values that do not depend on the GPU (CPU-side
        overheads) and for training stacks (tried: out-of-source error rose, median 9.9 → 10.3 %).
        With a ``precision``, each family is tried at that precision first (``trtllm@hopper/fp8``:
        an engine's FP8 GEMMs and weight-only dequantising kernels are its own, apart from its
        16-bit ones)."""
        families = self.family_chain(family) if per_family else []
        on = [(f"{f}/{precision}", f) if precision else (f,) for f in families]
        return [key for s in self.chain(kind, stack) for key in (*(f"{s}@{k}" for ks in on for k in ks), s)]

    def param_stack_keys(self, kind: Kind, param: Parameter, stack: str, family: str, precision: str) -> list[str]:
        """``stack_keys`` as ``param.by`` asks: per family, and per precision, or neither."""
        return self.stack_keys(kind, stack, family, "stack@family" in param.by,
                               efficiency_precision(precision) if "stack@precision" in param.by else "")

    def resolve(self, kind: Kind, family: str, precision: str, stack: str) -> Resolved:
        """The most specific value of every parameter for a GPU family, precision and stack."""
        table = self.table.training if kind == "training" else self.table.serving
        families = self.family_chain(family)
        precision = efficiency_precision(precision)
        values: dict[str, float] = {}
        keys, gaps = [], set()
        support = self.table.support.get(kind, Support())
        if family not in support.families:
            gaps.add(f"GPU family {family}")
        if stack not in support.stacks:
            gaps.add(f"{'stack' if kind == 'training' else 'engine'} {stack}")
        for name, param in table.items():
            hw_key = next((k for f in families for k in (f"{f}/{precision}", f) if k in param.hardware), "")
            st_key = next((s for s in self.param_stack_keys(kind, param, stack, family, precision)
                           if s in param.stacks), "")
            lo, hi = param.range
            value = param.hardware[hw_key].value if hw_key else param.default.value  # in range (``_in_range``)
            if st_key:
                value = value * param.stacks[st_key].value if param.multiply else param.stacks[st_key].value
            value *= self.release_factor(kind, param, stack, st_key)
            floor = param.stack_floor if st_key and param.stack_floor is not None else lo
            values[name] = min(max(value, floor), hi)
            keys.append((name, hw_key or "default", st_key))
        cls = TrainParams if kind == "training" else ServeParams
        return Resolved(cls(**values), tuple(keys), tuple(sorted(gaps)))


def load_efficiency(root: Path) -> Efficiency:
    """Read catalogs/efficiency.yaml and catalogs/stacks.yaml and check their references."""
    eff_path, stacks_path = root / "efficiency.yaml", root / "stacks.yaml"
    table = validate(EfficiencyFile, read_yaml(eff_path, CatalogError), eff_path, CatalogError)
    stacks_file = validate(StacksFile, read_yaml(stacks_path, CatalogError), stacks_path, CatalogError)
    stacks = {s.id: s for s in stacks_file.training}
    engines = {e.id: e for e in stacks_file.serving}
    for kind, entries in (("training", stacks), ("serving", engines)):
        for entry in entries.values():
            if entry.like and entry.like not in entries:
                raise CatalogError(f"{stacks_path}: {kind} '{entry.id}': like '{entry.like}' is not a {kind} "
                                   f"entry.{suggest(entry.like, entries)} To fix: name one of {', '.join(entries)}.")
        for vendor, ident in stacks_file.defaults.get(kind, {}).items():  # type: ignore[call-overload]
            if ident not in entries:
                raise CatalogError(f"{stacks_path}: defaults.{kind}.{vendor}: '{ident}' is not a {kind} entry."
                                   f"{suggest(ident, entries)}")
        _check_keys(eff_path, stacks_path.name, kind, table.training if kind == "training" else table.serving,
                    entries)
    defaults: dict[str, dict[str, str]] = {kind: vendors for kind, vendors in stacks_file.defaults.items()}
    return Efficiency(table, stacks, engines, defaults, table.reserved_memory_gb * 1e9, table.memory_headroom)


def _check_keys(eff_path: Path, stacks_name: str, kind: str, params: dict[str, Parameter],
                entries: Mapping[str, object]) -> None:
    """Every value of ``params`` is keyed by a precision of the kind that has values of its own (not
    fp16: one tensor-core rate with bf16), a GPU family and an engine or stack that ``entries`` lists
    (the families of the catalog's GPUs are checked with the catalog, ``catalog._check_efficiency_keys``),
    and no finer than the parameter's ``by`` reads (a ``trtllm@hopper/fp8`` value needs 'stack@precision')."""
    precisions = PRECISIONS if kind == "training" else SERVE_PRECISIONS
    for name, param in params.items():
        on_families = [(f"{kind}.{name}.hardware", key, key) for key in param.hardware]
        on_families += [(f"{kind}.{name}.stacks", key, key.partition("@")[2]) for key in param.stacks]
        for where, key, on in on_families:
            if (precision := on.partition("/")[2]) in SAME_RATE:
                shared = SAME_RATE[precision]
                raise CatalogError(f"{eff_path}: {where}: '{key}': {precision} values are stored under {shared} "
                                   f"(one tensor-core rate). To fix: remove it; 'gpuopt fit' fits {precision} rows "
                                   f"into the {shared} value.")
            if precision and precision not in precisions:
                raise CatalogError(f"{eff_path}: {where}: '{key}' names unknown {kind} precision '{precision}'."
                                   f"{suggest(precision, precisions)} Known: {', '.join(precisions)}.")
        for key in param.stacks:
            engine, _, on = key.partition("@")
            unread = ("stack@precision" if "/" in on else "stack@family") if on else "stack"
            if unread not in param.by:
                raise CatalogError(f"{eff_path}: {kind}.{name}.stacks: '{key}' is never read: {name}'s 'by' does "
                                   f"not list '{unread}'. To fix: remove the value, or add '{unread}' to 'by' "
                                   "and run 'gpuopt fit'.")
            if (family := on.partition("/")[0]) and family not in GPU_FAMILIES:
                raise CatalogError(f"{eff_path}: {kind}.{name}.stacks: '{key}': '{family}' is not a GPU family."
                                   f"{suggest(family, GPU_FAMILIES)}")
            if engine not in entries:
                raise CatalogError(f"{eff_path}: {kind}.{name}.stacks: '{engine}' is not in {stacks_name}."
                                   f"{suggest(engine, entries)} To fix: add it there or remove the value.")


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
    kv_on_demand: bool
    paged_v1v2: bool
    overlap_scheduler: bool
    mixed_batching: bool
