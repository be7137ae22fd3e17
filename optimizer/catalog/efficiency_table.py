"""The schema of ``catalogs/efficiency.yaml``: each efficiency parameter of the performance model
(``perf.params``) with its meaning, range and prior, and the values ``gpuopt fit`` wrote for it per
GPU family and per stack, with the rows and sources behind each (``optimizer.catalog.stacks``
resolves them for a context)."""

from __future__ import annotations

from dataclasses import fields
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from optimizer.perf.params import ServeParams, TrainParams

Kind = Literal["training", "serving"]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Value(Record):
    value: float
    rows: int = Field(default=0, ge=0)  # calibration rows that informed it
    sources: int = Field(default=0, ge=0)


MULTIPLIER_RANGE = (0.2, 1.5)  # a stack's multiplier of a ``multiply`` parameter
# the range of ``release_overhead``: a guard against a degenerate fit, not a prior (the fitted pairs'
# median was 2.2 before earlier releases shrank toward it, 3.1 since; single pairs run from 0.05 to 500)
RELEASE_RATIO = (1 / 16, 16.0)


class Parameter(Record):
    meaning: str
    range: tuple[float, float]
    prior: float  # the documented physical expectation the fit starts from and shrinks the default to
    prior_source: str
    # what it may take values per (else one global value); "stack@family": per stack on a GPU family;
    # "stack@precision": per stack on a GPU family and precision as well ("trtllm@hopper/fp8")
    by: tuple[Literal["hardware", "stack", "stack@family", "stack@precision"], ...] = ()
    default: Value
    multiply: bool = False  # stack values multiply the hardware value (else they replace it)
    # a multiplied parameter: how low a stack's multiplier may take the product (else the range's low
    # end), the family's own value keeping the range: one engine release's kernels, not the GPU's
    stack_floor: float | None = None
    stack_floor_source: str = ""
    pooled: bool = True  # stack values shrink toward the default (else each toward the prior, on its own)
    # a host overhead that earlier engine releases carry more of: an ``earlier_release`` engine without a
    # value of its own takes its successor's times ``release_overhead`` per release between them
    release_trend: bool = False
    hardware: dict[str, Value] = {}  # "family" or "family/precision" → value
    stacks: dict[str, Value] = {}  # stack or engine id (or "id@family", "id@family/precision") → value (or multiplier)

    @model_validator(mode="after")
    def _in_range(self) -> Parameter:
        if "stack@precision" in self.by and "stack@family" not in self.by:
            raise ValueError("'stack@precision' refines 'stack@family': list both")
        if self.release_trend and (self.multiply or "stack" not in self.by):
            raise ValueError("release_trend needs a value per stack ('stack' in by) that replaces (multiply: false)")
        lo, hi = self.range
        if self.stack_floor is not None and not (self.multiply and 0 < self.stack_floor <= lo
                                                 and self.stack_floor_source):
            raise ValueError(f"stack_floor {self.stack_floor} needs multiply: true, a value in (0, {lo}] "
                             "and a stack_floor_source")
        values = [("default", self.default)] + list(self.hardware.items())
        if not self.multiply:
            values += list(self.stacks.items())
        for key, v in values:
            if not lo <= v.value <= hi:
                raise ValueError(f"{key}: {v.value} is outside the range [{lo}, {hi}]")
        return self


class Support(Record):
    """Calibration rows behind a kind's parameters, by GPU family and by stack (or engine)."""

    families: dict[str, int] = {}
    stacks: dict[str, int] = {}


class Ceiling(Record):
    """The highest MFU published runs reached: ``value`` (of the plan precision's dense peak) by
    ``row`` of ``source``, the most of ``rows`` dense-model runs."""

    value: float = Field(gt=0, le=1)
    rows: int = Field(ge=1)
    row: str
    source: str


class MfuCeilings(Record):
    """Per GPU family and precision (``family/precision``, where enough dense runs were published),
    else ``default`` (every dense run): a training plan predicted above it is a model error."""

    default: Ceiling
    hardware: dict[str, Ceiling] = {}


class ReleaseRatio(Record):
    """How many times its successor's host overheads an earlier engine release carries: the median,
    over every pair of an ``earlier_release`` engine and the engine it is like that both have fitted
    values, and every ``release_trend`` parameter, of the ratio of the two values."""

    value: float = Field(ge=RELEASE_RATIO[0], le=RELEASE_RATIO[1])
    pairs: int = Field(default=0, ge=0)  # (engine pair, parameter) ratios it is the median of
    source: str = ""


class EfficiencyFile(Record):
    schema_version: int
    fitted: str  # how and when the values were fitted
    families: dict[str, str] = {}  # GPU family with no rows → the family whose values it takes
    support: dict[Kind, Support] = {}
    reserved_memory_gb: float = Field(ge=0, le=100)
    reserved_memory_source: str
    memory_headroom: float = Field(default=0.0, ge=0, lt=0.9)  # share of a GPU's memory a training plan leaves free
    memory_headroom_source: str = ""
    mfu_ceiling: MfuCeilings | None = None  # None: no guard (a catalog fitted before it existed)
    release_overhead: ReleaseRatio | None = None  # None: an earlier release takes its successor's overheads as they are
    training: dict[str, Parameter]
    serving: dict[str, Parameter]

    @model_validator(mode="after")
    def _known(self) -> EfficiencyFile:
        trained = sorted(name for name, p in self.training.items() if p.release_trend)
        if trained:
            raise ValueError(f"training: {trained}: release_trend is for serving engines' host overheads")
        for kind, cls in (("training", TrainParams), ("serving", ServeParams)):
            names = {f.name for f in fields(cls)}
            table = getattr(self, kind)
            unknown = sorted(set(table) - names)
            missing = sorted(names - set(table))
            if unknown or missing:
                raise ValueError(f"{kind}: unknown parameters {unknown}, missing {missing}; the model has "
                                 f"{sorted(names)}")
        return self
