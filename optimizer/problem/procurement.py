"""How a problem may acquire hardware: buy, rent, or use what it owns; under which site limits
(racks, floor, export region, vendors, availability) and at which prices (the price book).

The problem file's ``inventory``, ``procurement``, ``prices``, ``site.racks`` and
``hardware.max_units`` sections are validated here into frozen records the plan and MIP
stages read; nothing here solves or prints.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from optimizer.catalog import Catalog, priced_item, with_price
from optimizer.errors import CatalogError, ProblemError, suggest
from optimizer.validation import Count, parse_quantity

if TYPE_CHECKING:  # the schema imports this module
    from optimizer.problem.schema import ProblemFile


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class OwnedEntry(_Strict):
    """GPUs the site already has: loose cards, or cards in servers it already has."""

    gpu: str
    count: Count = Field(ge=1, le=100_000)
    server: str | None = None  # the server type they sit in (None: loose cards)
    servers: Count | None = Field(default=None, ge=1)  # how many of those servers (default: as few as hold them)
    fabric: str | None = None  # the servers already carry this fabric's NICs


class RacksEntry(_Strict):
    count: Count | None = Field(default=None, ge=1, le=100_000)  # racks the site has (None: buy as needed)
    cooling: Literal["air", "liquid"] = "air"
    kw_per_rack: float | None = Field(default=None, gt=0, le=1000)
    units: int | None = Field(default=None, ge=1, le=60)
    usd_per_rack: float | None = Field(default=None, ge=0)


class ProcurementEntry(_Strict):
    buy: bool = True
    rent: bool | None = None  # None: rent where the problem minimises cost (buying and renting compared)
    offers: tuple[str, ...] | None = None  # cloud offers allowed (None: every offer for an allowed GPU)


class PriceEntry(_Strict):
    usd: float | None = Field(default=None, ge=0)
    change: str | None = None  # "-20%" relative to the catalog price
    date: str | None = None
    note: str = "problem file price book"


@dataclass(frozen=True)
class Owned:
    """One inventory line, resolved: ``servers`` 0 for loose cards."""

    gpu: str
    count: int
    server: str | None
    servers: int
    fabric: str | None

    @property
    def pool(self) -> str:
        return f"owned:{self.gpu}:{self.server or 'loose'}"


@dataclass(frozen=True)
class RackLimits:
    """The site's racks: how many exist (None: bought as needed), their power and height."""

    count: int | None
    kw: float
    units: int
    usd: float
    floor_max: int | None  # most racks the floor takes, if a floor area is given

    @property
    def max_racks(self) -> int | None:
        limits = [n for n in (self.count, self.floor_max) if n is not None]
        return min(limits) if limits else None


@dataclass(frozen=True)
class PriceOverride:
    item: str
    usd: float
    date: str
    note: str
    change: float | None = None  # a relative entry's factor ('-20%': 0.8), applied to the price bought at

    @property
    def quote(self) -> bool:
        """A price in USD, not a change: what unlocks a GPU no longer sold new."""
        return self.change is None


class ProcurementFields(TypedDict):
    """The ``Problem`` fields ``resolve_procurement`` fills in."""

    gpus: tuple[str, ...]
    buy_gpus: tuple[str, ...]
    end_of_life: tuple[str, ...]
    inventory: tuple[Owned, ...]
    offers: tuple[str, ...]
    offers_anywhere: tuple[str, ...]
    max_units: tuple[tuple[str, int], ...]
    maintenance_per_year: float
    colocation_usd_per_kw_month: float
    installation_usd_per_server: float
    racks: RackLimits | None
    prices: tuple[PriceOverride, ...]
    region: str | None


def resolve_inventory(path: Path, entries: tuple[OwnedEntry, ...], catalog: Catalog) -> tuple[Owned, ...]:
    """Check ids and fit; merge lines of the same GPU in the same server type."""
    merged: dict[tuple[str, str | None], Owned] = {}
    for i, e in enumerate(entries):
        where = f"{path}: field 'inventory[{i}]'"
        if e.gpu not in catalog.gpus:
            raise ProblemError(f"{path}: field 'inventory[{i}].gpu': unknown GPU '{e.gpu}'."
                               f"{suggest(e.gpu, catalog.gpus)} To fix: use an id from 'gpuopt catalog list'.")
        servers = 0
        if e.server is not None:
            if e.server not in catalog.servers:
                raise ProblemError(f"{path}: field 'inventory[{i}].server': unknown server '{e.server}'."
                                   f"{suggest(e.server, catalog.servers)}")
            server = catalog.servers[e.server]
            if e.gpu not in server.accepts:
                fits = ", ".join(s.id for s in catalog.servers_for(e.gpu)) or "none"
                raise ProblemError(f"{where}: server '{e.server}' does not take '{e.gpu}'. To fix: use one of {fits}.")
            servers = e.servers or math.ceil(e.count / server.slots)
            if servers * server.slots < e.count:
                raise ProblemError(f"{where}: {servers} x {e.server} hold {servers * server.slots} GPUs, not {e.count}."
                                   " To fix: raise 'servers'.")
            if e.fabric is not None and e.fabric not in server.fabrics:
                raise ProblemError(f"{path}: field 'inventory[{i}].fabric': '{e.fabric}' is not a fabric of "
                                   f"{e.server}. To fix: use one of {', '.join(server.fabrics) or 'none (omit it)'}.")
        elif e.servers is not None or e.fabric is not None:
            raise ProblemError(f"{where}: 'servers' and 'fabric' need the 'server' the cards sit in.")
        key = (e.gpu, e.server)
        old = merged.get(key)
        if old is not None:
            if old.fabric != e.fabric:
                raise ProblemError(f"{where}: two lines of {e.gpu} in {e.server} name different fabrics.")
            merged[key] = Owned(e.gpu, old.count + e.count, e.server, old.servers + servers, e.fabric)
        else:
            merged[key] = Owned(e.gpu, e.count, e.server, servers, e.fabric)
    return tuple(merged[k] for k in sorted(merged, key=lambda k: (k[0], k[1] or "")))


def resolve_offers(path: Path, proc: ProcurementEntry, catalog: Catalog, gpus: tuple[str, ...],
                   rent_by_default: bool = False) -> tuple[str, ...]:
    """Cloud offers the problem may rent: the listed ones, or every offer for an allowed GPU. Where
    the file does not say (procurement.rent), ``rent_by_default``: a problem that minimises cost
    compares buying with renting."""
    if not (proc.rent if proc.rent is not None else rent_by_default or bool(proc.offers)):
        if proc.offers:
            raise ProblemError(f"{path}: field 'procurement.offers' is given but 'rent' is false. "
                               "To fix: set procurement.rent: true.")
        return ()
    for ident in proc.offers or ():
        if ident not in catalog.offers:
            raise ProblemError(f"{path}: field 'procurement.offers': unknown offer '{ident}'."
                               f"{suggest(ident, catalog.offers)} To fix: use one of "
                               f"{', '.join(sorted(catalog.offers))}.")
    chosen = proc.offers if proc.offers is not None else tuple(sorted(catalog.offers))
    return tuple(o for o in chosen if catalog.offers[o].gpu in gpus)


def resolve_racks(path: Path, entry: RacksEntry | None, floor_m2: float | None, catalog: Catalog) -> RackLimits | None:
    if entry is None and floor_m2 is None:
        return None
    entry = entry or RacksEntry()
    facts = catalog.facility.racks
    kw = entry.kw_per_rack or (facts.kw_air.value if entry.cooling == "air" else facts.kw_liquid.value)
    floor_max = int(floor_m2 // facts.floor_m2.value) if floor_m2 is not None else None
    if floor_max == 0:
        raise ProblemError(f"{path}: field 'site.floor_m2': {floor_m2} m² holds no rack ({facts.floor_m2.value} m² "
                           "each with its aisles). To fix: give the machine room's floor area.")
    return RackLimits(entry.count, kw * 1e3, entry.units or int(facts.units.value),
                      facts.usd.value if entry.usd_per_rack is None else entry.usd_per_rack, floor_max)


_CHANGE = re.compile(r"\s*([+-]?[0-9]*\.?[0-9]+)\s*%\s*")


def parse_change(text: str) -> float:
    """'-20%' → 0.8 (the factor on the catalog price)."""
    m = _CHANGE.fullmatch(text)
    if not m:
        raise ValueError(f"expected a change such as '-20%' or '+5%', got {text!r}")
    return 1.0 + float(m.group(1)) / 100.0


def change_of(value: float | str) -> float | None:
    """The factor of a relative price ('-12%': 0.88), None for a price in USD."""
    return parse_change(value) if isinstance(value, str) and "%" in value else None


def price_value(value: float | str, base: float) -> float:
    """A price as written in a price book or after --price ID=: 21000, '21k', or '-12%' of ``base``.
    Raises ValueError with what was expected."""
    usd = base * parse_change(value) if isinstance(value, str) and "%" in value else parse_quantity(value)
    if usd < 0:
        raise ValueError(f"the price comes out negative (${usd:,.2f})")
    return usd


def resolve_prices(path: Path, book: dict[str, float | str | PriceEntry],
                   catalog: Catalog) -> tuple[PriceOverride, ...]:
    """The problem's price book: each entry a new price, a relative change, or both with a date and note."""
    out = []
    for item, value in sorted(book.items()):
        where = f"{path}: field 'prices.{item}'"
        try:
            _, entry = priced_item(catalog, item)
        except CatalogError as exc:
            raise ProblemError(f"{where}: {exc}") from None
        base = entry.price.usd
        raw: float | str
        if isinstance(value, PriceEntry):
            if value.usd is not None and value.change is None:
                raw = value.usd
            elif value.change is not None and value.usd is None:
                raw = value.change
            else:
                raise ProblemError(f"{where}: give exactly one of 'usd' and 'change'. "
                                   "To fix: usd: 21000 or change: '-15%'.")
            date, note = value.date or "undated", value.note
        else:
            raw = value
            date, note = "undated", "problem file price book"
        try:
            usd = price_value(raw, base)
        except ValueError as exc:
            raise ProblemError(f"{where}: {exc}. To fix: a price in USD (21000, '21k') or a change ('-15%').") from None
        out.append(PriceOverride(item, usd, date, f"{note} (catalog ${base:,.2f})", change_of(raw)))
    return tuple(out)


def apply_prices(catalog: Catalog, prices: tuple[PriceOverride, ...]) -> Catalog:
    """The catalog with the price book applied: what every later stage prices from. A change
    ('-20%') applies to the price in ``catalog`` (a used one where the problem buys used)."""
    for p in prices:
        usd = p.usd if p.change is None else priced_item(catalog, p.item)[1].price.usd * p.change
        catalog = with_price(catalog, p.item, usd, p.note, p.date)
    return catalog


def nothing_usable(path: Path, end_of_life: tuple[str, ...], catalog: Catalog) -> ProblemError:
    """The error of a problem with nothing to buy, rent or use, naming GPUs no longer sold new."""
    if not end_of_life:
        return ProblemError(f"{path}: nothing can be used: buying is off or no GPU may be bought here, nothing is "
                            "rented and the inventory is empty. To fix: set procurement.buy or procurement.rent, "
                            "or list an inventory.")
    used = [f"{g} ${p.usd:,.0f}, {p.date}" for g in end_of_life if (p := catalog.gpus[g].used_price)]
    return ProblemError(f"{path}: nothing can be used: {', '.join(end_of_life)} "
                        f"{'is' if len(end_of_life) == 1 else 'are'} no longer sold new, nothing is rented and the "
                        "inventory is empty. To fix: set hardware.allow_used: true to buy used ones"
                        + (f" ({'; '.join(used)})" if used else "") + ", quote a price in the problem's 'prices', "
                        "allow a GPU still sold new, or set procurement.rent.")


def _end_of_life(spec: ProblemFile, buy: tuple[str, ...], catalog: Catalog) -> tuple[str, ...]:
    """The GPUs to buy that are no longer sold new: bought only used, where the problem allows used
    hardware, or at a price in USD its price book quotes (a change of the last new price is no quote)."""
    quoted = {g for g, v in spec.prices.items() if (v.usd is not None if isinstance(v, PriceEntry) else
                                                    change_of(v) is None)}
    return tuple(g for g in buy if not catalog.gpus[g].sold_new and g not in quoted
                 and not (spec.hardware.allow_used and catalog.gpus[g].used_price))


def resolve_procurement(path: Path, spec: ProblemFile, gpus: tuple[str, ...], catalog: Catalog) -> ProcurementFields:
    """The Problem fields of the procurement sections of a validated ``ProblemFile``: which GPUs
    may be used and bought (vendors, region, buy switch), the inventory, offers, caps, racks,
    facility cost terms and the price book."""
    hw, site, proc = spec.hardware, spec.site, spec.procurement
    vendors = sorted({g.vendor for g in catalog.gpus.values()})
    for field, names in (("allow_vendors", hw.allow_vendors or ()), ("exclude_vendors", hw.exclude_vendors)):
        for name in names:
            if name not in vendors:
                raise ProblemError(f"{path}: field 'hardware.{field}': unknown vendor '{name}'.{suggest(name, vendors)}"
                                   f" To fix: use one of {', '.join(vendors)}.")
    gpus = tuple(g for g in gpus if catalog.gpus[g].vendor not in hw.exclude_vendors
                 and (hw.allow_vendors is None or catalog.gpus[g].vendor in hw.allow_vendors))
    buy = gpus
    if site.region is not None:
        if site.region not in catalog.regions:
            raise ProblemError(f"{path}: field 'site.region': unknown region '{site.region}'."
                               f"{suggest(site.region, catalog.regions)} To fix: use one of "
                               f"{', '.join(sorted(catalog.regions))}, or omit it.")
        buy = tuple(g for g in buy if g in catalog.regions[site.region].allowed_gpus)
    inventory = resolve_inventory(path, spec.inventory, catalog)
    usable = tuple(dict.fromkeys(gpus + tuple(o.gpu for o in inventory if o.gpu not in hw.exclude_gpus)))
    offers = resolve_offers(path, proc, catalog, buy, rent_by_default=spec.objective == "min_cost")
    anywhere = resolve_offers(path, proc, catalog, gpus, spec.objective == "min_cost") if site.region else offers
    end_of_life = _end_of_life(spec, buy, catalog) if proc.buy else ()
    buy = tuple(g for g in buy if g not in end_of_life) if proc.buy else ()
    for item, n in hw.max_units.items():
        if item not in catalog.gpus and item not in catalog.servers:
            ids = list(catalog.gpus) + list(catalog.servers)
            raise ProblemError(f"{path}: field 'hardware.max_units': unknown GPU or server '{item}'."
                               f"{suggest(item, ids)}")
        if n < 0:
            raise ProblemError(f"{path}: field 'hardware.max_units.{item}': must be 0 or more, got {n}.")
    if not buy and not offers and not inventory and not end_of_life:  # (those wait for the price book)
        raise nothing_usable(path, (), catalog)
    fac = catalog.facility
    colo = site.colocation_usd_per_kw_month
    if colo is None:
        colo = fac.colocation_usd_per_kw_month.value if site.colocation else 0.0
    return ProcurementFields(
        gpus=usable,
        buy_gpus=buy,
        end_of_life=end_of_life,
        inventory=inventory,
        offers=offers,
        offers_anywhere=anywhere,
        max_units=tuple(sorted(hw.max_units.items())),
        maintenance_per_year=(fac.maintenance_per_year.value if site.maintenance_per_year is None
                              else site.maintenance_per_year),
        colocation_usd_per_kw_month=colo,
        installation_usd_per_server=site.installation_usd_per_server,
        racks=resolve_racks(path, site.racks, site.floor_m2, catalog),
        prices=resolve_prices(path, spec.prices, catalog),
        region=site.region,
    )


def parse_cli_price(spec: str, catalog: Catalog) -> PriceOverride:
    """'ID=25000', 'ID=25k' or 'ID=-20%' from the command line: one price override."""
    item, sep, value = (part.strip() for part in spec.partition("="))
    if not sep or not item or not value:
        raise ProblemError(f"--price '{spec}': expected ID=PRICE or ID=CHANGE, e.g. h100-sxm=21000 or h100-sxm=-15%.")
    try:
        _, entry = priced_item(catalog, item)
    except CatalogError as exc:
        raise ProblemError(f"--price '{spec}': {exc}") from None
    base = entry.price.usd
    try:
        usd = price_value(value, base)
    except ValueError as exc:
        raise ProblemError(f"--price '{spec}': {exc}. To fix: h100-sxm=21000, =21k or =-15%.") from None
    return PriceOverride(item, usd, "undated", f"--price {item}={value} (catalog ${base:,.2f})", change_of(value))
