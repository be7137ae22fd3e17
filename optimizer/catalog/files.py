"""The schema of each catalog file (catalogs/gpus.yaml, servers.yaml, network.yaml, models.yaml,
regions.yaml, cloud.yaml, uncertainty.yaml): a version and its tables of records."""

from __future__ import annotations

from pydantic import ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from optimizer.catalog.model_records import ModelPreset
from optimizer.catalog.offers import Offer
from optimizer.catalog.records import (
    Bands,
    Cable,
    Fabric,
    Gpu,
    LinkType,
    Nic,
    Record,
    Region,
    Server,
    SpecSource,
    Switch,
)


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
