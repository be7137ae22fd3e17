"""The bill of materials of a recommendation, the assumptions behind its figures, and the BOM
written as .csv, .xlsx, .json or .md (deterministic bytes)."""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer.catalog import Catalog, Price
from optimizer.errors import ProblemError
from optimizer.milp import GroupCount, fabric_links, rent_cost
from optimizer.plans import Group
from optimizer.problem import Problem, TrainWorkload
from optimizer.recommend import Recommendation, targets_of

BOM_COLUMNS = ("category", "sku", "description", "quantity", "unit_price_usd", "extended_price_usd",
               "unit_power_w", "power_w", "source")


@dataclass(frozen=True)
class BomRow:
    category: str
    sku: str
    description: str
    quantity: int
    unit_price_usd: float
    unit_power_w: float
    source: str

    @property
    def extended_price_usd(self) -> float:
        return self.quantity * self.unit_price_usd

    @property
    def power_w(self) -> float:
        return self.quantity * self.unit_power_w

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in BOM_COLUMNS}


def _src(price: Price) -> str:
    """A BOM row's source: an assumed price says ASSUMPTION once, whether or not its source text
    already starts with the word ('assumption: no price found' is not doubled)."""
    text = price.source
    if price.assumption:
        text = "ASSUMPTION: " + re.sub(r"^assumption\s*[:,-]?\s*", "", text, flags=re.IGNORECASE)
    return f"{text} [{price.date}]"


def bill_of_materials(rec: Recommendation, catalog: Catalog) -> list[BomRow]:
    """One row per item bought for every hardware group: GPUs, server platforms, NICs, switches,
    installation and racks; owned parts at $0 (they draw power); rentals at their cost."""
    rows: list[BomRow] = []
    for bought in rec.solution.purchases:
        g = rec.table.groups[bought.group]
        if g.rented:
            rows.append(_rented_row(rec, catalog, g, bought))
            continue
        rows += _server_rows(rec.problem, catalog, g, bought)
        if g.fabric is not None:
            rows += _fabric_rows(catalog, g, bought)
    rows += _rack_rows(rec, catalog)
    return [r for r in rows if r.quantity > 0]


def _rented_row(rec: Recommendation, catalog: Catalog, g: Group, bought: GroupCount) -> BomRow:
    """A rented group: its GPU-hours at the offer's rate (a term's hours, or the job's on demand)."""
    offer = catalog.offers[g.offer or ""]
    job = next((c for c, _ in rec.solution.plans if c.group == g.key), None)
    targets = targets_of(rec.problem)
    tokens = targets.job_tokens(job.workload) if job else targets.tokens
    usd = rent_cost(g, bought.gpus, tokens, job) / bought.gpus
    billed = (f"{g.rent_hours:,.0f} h ({offer.term})" if g.rent_hours
              else f"{usd / offer.price.usd:,.1f} h of the job ({'spot' if offer.interruptible else 'on demand'})")
    return BomRow("rent", offer.id, f"{offer.provider} {offer.name}: ${offer.price.usd:g}/GPU-hour x {billed}",
                  bought.gpus, usd, 0.0, _src(offer.price))


def _server_rows(p: Problem, catalog: Catalog, g: Group, bought: GroupCount) -> list[BomRow]:
    """GPUs and server platforms, owned first at $0, then bought, and their installation."""
    gpu, server = catalog.gpus[g.gpu], catalog.servers[g.server]
    owned = " (owned)"
    rows = []
    if bought.owned_gpus:
        rows.append(BomRow("owned", gpu.id, gpu.name + owned, bought.owned_gpus, 0.0, gpu.tdp_w, "inventory"))
    if bought.gpus > bought.owned_gpus:
        name = gpu.name + (" (used)" if gpu.price.condition == "used" else "")
        rows.append(BomRow("gpu", gpu.id, name, bought.gpus - bought.owned_gpus, gpu.price.usd, gpu.tdp_w,
                           _src(gpu.price)))
    platform = server.name + " (platform, without GPUs)"
    if bought.owned_servers:
        rows.append(BomRow("owned", server.id, platform + owned, bought.owned_servers, 0.0, server.base_power_w,
                           "inventory"))
    new_servers = bought.servers - bought.owned_servers
    if new_servers:
        rows.append(BomRow("server", server.id, platform, new_servers, server.price.usd, server.base_power_w,
                           _src(server.price)))
        if p.installation_usd_per_server:
            rows.append(BomRow("install", server.id, "installation per server (problem file)", new_servers,
                               p.installation_usd_per_server, 0.0, "problem file site.installation_usd_per_server"))
    return rows


def _fabric_rows(catalog: Catalog, g: Group, bought: GroupCount) -> list[BomRow]:
    """The fabric of a group: NICs, server and uplink cables (owned ones at $0), and switches."""
    assert g.fabric is not None
    fabric = catalog.fabrics[g.fabric]
    switch = catalog.switches[fabric.switch]
    owned = " (owned)"
    owned_nics = bought.owned_servers if g.owned_nics else 0
    rows = []
    if fabric.nic is not None:
        nic = catalog.nics[fabric.nic]
        each = f"{nic.name}, {fabric.nics_per_server} per server"
        if owned_nics:
            rows.append(BomRow("owned", nic.id, each + owned, owned_nics * fabric.nics_per_server, 0.0,
                               nic.power_w, "inventory"))
        rows.append(BomRow("nic", nic.id, each, (bought.servers - owned_nics) * fabric.nics_per_server,
                           nic.price.usd, nic.power_w, _src(nic.price)))
    links, uplinks = fabric_links(g, bought)
    owned_links = owned_nics * g.ports_per_server
    for cable_id, count, where, category in (
            (fabric.server_cable, owned_links, "server to leaf" + owned, "owned"),
            (fabric.server_cable, links - owned_links, "server to leaf", "cable"),
            (fabric.switch_cable, uplinks, "leaf to spine", "cable")):
        if cable_id is not None and count:
            cable = catalog.cables[cable_id]
            rows.append(BomRow(category, cable.id, f"{cable.name} ({where})", count,
                               0.0 if category == "owned" else cable.price.usd, cable.power_w,
                               "inventory" if category == "owned" else _src(cable.price)))
    switches = bought.leaf_switches + bought.spine_switches
    tier = ("one switch" if bought.spine_switches == 0
            else f"{bought.leaf_switches} leaf + {bought.spine_switches} spine; each leaf {g.leaf_down} ports "
                 f"down, {g.leaf_up} up, {g.oversubscription:.3g}:1")
    rows.append(BomRow("switch", switch.id, f"{switch.name} ({tier})", switches, switch.price.usd,
                       switch.power_w, _src(switch.price)))
    return rows


def _rack_rows(rec: Recommendation, catalog: Catalog) -> list[BomRow]:
    """New racks, where the problem models racks and the site has to buy them."""
    p, costs = rec.problem, rec.solution.costs
    if p.racks is None or costs is None or not costs.new_racks:
        return []
    facts = catalog.facility.racks
    price = Price(usd=p.racks.usd, date=facts.usd.date or "", source=facts.usd.source,
                  assumption=facts.usd.assumption)
    return [BomRow("rack", "rack", f"{p.racks.units}U rack for {p.racks.kw / 1e3:g} kW",
                   costs.new_racks, p.racks.usd, 0.0, _src(price))]


def assumptions_used(rec: Recommendation, catalog: Catalog) -> list[str]:
    """The figures behind this answer that no source gives (prices and efficiency factors, and the
    failure and spot allowances of a training job)."""
    out: list[str] = []
    runs = _runs(rec)
    for bought in rec.solution.purchases:
        g = rec.table.groups[bought.group]
        gpu, server = catalog.gpus[g.gpu], catalog.servers[g.server]
        for kind, precision, stack in sorted(runs.get(bought.group, ()), key=str):
            gaps = catalog.resolve(kind, gpu.id, precision, stack).extrapolated
            if gaps:
                out.append(f"{gpu.id} efficiency: no {kind} calibration rows for {' and '.join(gaps)}; borrowed "
                           "values (catalogs/efficiency.yaml), wider band")
        if not g.rented:  # a rental's price is the offer's, sourced
            out += [f"{what} price ${price.usd:,.0f}: {price.source}"
                    for what, price in ((gpu.id, gpu.price), (server.id, server.price)) if price.assumption]
            if gpu.price.condition == "used" and bought.gpus > bought.owned_gpus:
                out.append(f"{gpu.id} bought used: performance, power and maintenance as new; no warranty "
                           "assumed, and a used unit's remaining life is not priced")
        link = catalog.links[gpu.link]
        if link.assumption and bought.gpus > 1:
            out.append(f"{link.id} link efficiency {link.efficiency:.0%} and latency {link.latency_us:g} us: "
                       f"{link.source}")
        if g.fabric is not None:
            out += _fabric_assumptions(catalog, g.fabric, priced=not g.rented)
    out += _goodput_assumptions(rec, catalog)
    return list(dict.fromkeys(out))


def _runs(rec: Recommendation) -> dict[str, set[tuple[str, str, str | None]]]:
    """Per group: the kind, number format and stack of each workload it runs."""
    workloads = {w.name: w for w in rec.problem.workloads}
    runs: dict[str, set[tuple[str, str, str | None]]] = {}
    for name, groups in rec.solution.usage().items():
        w = workloads[name]
        kind, formats = ("training", (w.precision,)) if isinstance(w, TrainWorkload) else ("serving", w.precisions)
        for group in groups:
            runs.setdefault(group, set()).update((kind, fmt, w.stack) for fmt in formats)
    return runs


def _fabric_assumptions(catalog: Catalog, fabric_id: str, priced: bool) -> list[str]:
    """A fabric's efficiency, and where it is bought, the prices of its parts, that no source gives."""
    fabric = catalog.fabrics[fabric_id]
    out = [f"{fabric.id} efficiency {fabric.efficiency:.0%}: {fabric.source}"] if fabric.assumption else []
    if not priced:
        return out
    if fabric.nic is not None and catalog.nics[fabric.nic].price.assumption:
        out.append(f"{fabric.nic} price: {catalog.nics[fabric.nic].price.source}")
    switch = catalog.switches[fabric.switch]
    if switch.price.assumption:
        out.append(f"{switch.id} price: {switch.price.source}")
    for cable_id in (fabric.server_cable, fabric.switch_cable):
        if cable_id is not None and catalog.cables[cable_id].price.assumption:
            out.append(f"{cable_id} price: {catalog.cables[cable_id].price.source}")
    return out


def _goodput_assumptions(rec: Recommendation, catalog: Catalog) -> list[str]:
    """A training job's checkpoint and restart times (where it expects failures), and the spot
    reclaim rate where it runs on spot capacity: assumptions of catalogs/facility.yaml."""
    facts, r = catalog.facility.reliability, rec.problem.reliability
    spot = any(rec.table.groups[c.group].interruptible for c, _ in rec.solution.plans)
    if not rec.solution.plans or (r.interruptions_per_gpu_day <= 0 and not spot):
        return []
    out = [f"{name} {fact.value:g} min: {fact.source}" for name, fact, used in
           (("checkpoint", facts.checkpoint_minutes, r.checkpoint_s), ("restart", facts.restart_minutes, r.restart_s))
           if fact.assumption and used == fact.value * 60.0]  # not where the problem gives its own
    if spot and facts.spot_interruptions_per_gpu_day.assumption:
        spot_rate = facts.spot_interruptions_per_gpu_day
        out.append(f"spot reclaims {spot_rate.value:g} per GPU-day: {spot_rate.source}")
    return out


def _deterministic_zip(data: bytes) -> bytes:
    """Rewrite an .xlsx with fixed entry times and document dates, so equal inputs give equal bytes
    (openpyxl stamps the time of saving into both)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                body = re.sub(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*", rb"\g<1>2000-01-01T00:00:00Z", body)
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, body)
    return out.getvalue()


def write_bom(rows: list[dict[str, Any]], path: Path) -> None:
    """Write the bill of materials; the format follows the extension (.csv .xlsx .json .md)."""
    ext = path.suffix.lower()
    if ext == ".csv":
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=BOM_COLUMNS)
            w.writeheader()
            w.writerows(rows)
    elif ext == ".json":
        path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    elif ext == ".md":
        path.write_text("\n".join(_bom_table(rows, markdown=True)) + "\n", encoding="utf-8")
    elif ext == ".xlsx":
        from openpyxl import Workbook

        wb = Workbook()
        ws = wb.active
        ws.title = "bill of materials"
        ws.append(list(BOM_COLUMNS))
        for r in rows:
            ws.append([r[k] for k in BOM_COLUMNS])
        ws.append(["total", "", "", "", "", sum(r["extended_price_usd"] for r in rows), "",
                   sum(r["power_w"] for r in rows), ""])
        buffer = io.BytesIO()
        wb.save(buffer)
        path.write_bytes(_deterministic_zip(buffer.getvalue()))
    else:
        raise ProblemError(f"--bom {path}: unknown extension '{path.suffix}'. To fix: use .csv, .xlsx, .json or .md.")


def _bom_table(rows: list[dict[str, Any]], markdown: bool) -> list[str]:
    out = []
    if markdown:
        out.append("| category | sku | qty | unit price | extended | power | source |")
        out.append("|---|---|---:|---:|---:|---:|---|")
        for r in rows:
            out.append(f"| {r['category']} | {r['sku']} | {r['quantity']} | {_money(r['unit_price_usd'])} | "
                       f"{_money(r['extended_price_usd'])} | {r['power_w'] / 1e3:,.2f} kW | {r['source']} |")
    else:
        for r in rows:
            star = "*" if r["source"].startswith("ASSUMPTION") else " "
            out.append(f"{r['category']:<7} {r['sku']:<16} {r['quantity']:>5} x {_money(r['unit_price_usd']):>10}"
                       f"{star}= {_money(r['extended_price_usd']):>12}  {r['power_w'] / 1e3:>7,.2f} kW  "
                       f"{r['description']}")
    total = sum(r["extended_price_usd"] for r in rows)
    out.append(f"{'' if markdown else 'total':<7} {'':<16} {'':>5}   {'':>10}   {_money(total):>12}"
               if not markdown else f"| **total** | | | | **{_money(total)}** | | |")
    return out


def _money(x: float) -> str:
    return f"${x:,.0f}"
