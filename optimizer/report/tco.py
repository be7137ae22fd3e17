"""Total cost of ownership of a recommendation, term by term; the prices it used; and the
utilisation at which buying the chosen hardware breaks even with renting it.

Every term is recomputed from the chosen purchases and the catalog (``milp.solution_costs``),
so what is printed adds up to the objective the solver minimised.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from optimizer.catalog import HOURS_PER_YEAR, Catalog, Offer, Price, priced_item
from optimizer.milp import GroupCount, capex_parts, group_costs, purchase, solution_costs
from optimizer.perf.goodput import goodput
from optimizer.plans.groups import Group, bare_group
from optimizer.problem.enums import Role
from optimizer.recommend import Recommendation, colocation_per_watt, electricity_per_watt, targets_of


def cost_terms(rec: Recommendation, catalog: Catalog) -> dict[str, Any]:
    """Capex (by part), depreciation, electricity, colocation, maintenance, rent and the TCO."""
    p, sol = rec.problem, rec.solution
    targets = targets_of(p)
    costs = sol.costs if sol.costs is not None else solution_costs(rec.table, targets, sol.purchases, sol.candidate)
    parts = {"gpus": 0.0, "servers": 0.0, "network": 0.0, "installation": 0.0, "racks": 0.0}
    for b in sol.purchases:
        for part, usd in capex_parts(rec.table.groups[b.group], b, targets.install_usd_per_server).items():
            parts[part] += usd
    if p.racks is not None:
        parts["racks"] = costs.new_racks * p.racks.usd
    life = catalog.facility.amortisation_years.value
    depreciation = costs.capex * min(1.0, p.horizon_years / life)
    electricity = electricity_per_watt(p) * costs.power_w
    colocation = colocation_per_watt(p) * costs.power_w
    maintenance = targets.maintenance * costs.value
    tco = costs.capex + electricity + colocation + maintenance + costs.rent
    return {
        "capex_usd": costs.capex, "capex_parts_usd": parts, "rent_usd": costs.rent,
        "it_power_kw": costs.power_w / 1e3, "facility_power_kw": costs.power_w / 1e3 * p.pue, "pue": p.pue,
        "load_factor": p.load_factor, "electricity_usd_per_kwh": p.electricity_usd_per_kwh,
        "horizon_years": p.horizon_years, "amortisation_years": life,
        "depreciation_usd": depreciation, "book_value_at_horizon_usd": costs.capex - depreciation,
        "electricity_usd": electricity, "opex_usd_per_year": electricity / p.horizon_years,
        "colocation_usd": colocation, "colocation_usd_per_kw_month": p.colocation_usd_per_kw_month,
        "maintenance_usd": maintenance, "maintenance_per_year": p.maintenance_per_year,
        "hardware_value_usd": costs.value, "racks": costs.racks, "new_racks": costs.new_racks,
        "tco_usd": tco,
    }


def _price_row(kind: str, ident: str, price: Price, unit: str = "") -> dict[str, Any]:
    return {"kind": kind, "id": ident, "usd": price.usd, "unit": unit, "date": price.date, "source": price.source,
            "assumption": price.assumption, "override": price.override, "condition": price.condition}


def prices_used(rec: Recommendation, catalog: Catalog) -> list[dict[str, Any]]:
    """Every catalog price the answer rests on, with its date and source; overrides flagged."""
    rows: dict[str, dict[str, Any]] = {}
    for b in rec.solution.purchases:
        g = rec.table.groups[b.group]
        if g.rented:
            offer = catalog.offers[g.offer or ""]
            rows[offer.id] = _price_row("offer", offer.id, offer.price, "per GPU-hour")
            continue
        gpu, server = catalog.gpus[g.gpu], catalog.servers[g.server]
        rows[gpu.id] = _price_row("gpu", gpu.id, gpu.price)
        rows[server.id] = _price_row("server", server.id, server.price)
        if g.fabric is not None:
            fabric = catalog.fabrics[g.fabric]
            if fabric.nic is not None:
                rows[fabric.nic] = _price_row("nic", fabric.nic, catalog.nics[fabric.nic].price)
            rows[fabric.switch] = _price_row("switch", fabric.switch, catalog.switches[fabric.switch].price)
            for cable in dict.fromkeys(c for c in (fabric.server_cable, fabric.switch_cable) if c is not None):
                rows[cable] = _price_row("cable", cable, catalog.cables[cable].price)
    for override in rec.problem.prices:  # the price book in force, whether or not the answer uses the item
        if override.item not in rows:
            rows[override.item] = {"kind": "unused", "id": override.item,
                                   "usd": priced_item(catalog, override.item)[1].price.usd,  # the price in force
                                   "unit": "", "date": override.date, "source": override.note,
                                   "assumption": False, "override": True, "condition": "new"}
    asof = _month(catalog.prices_as_of)
    for r in rows.values():  # a price dated over a year before the catalog's: a market may have moved
        dated = _month(r["date"])
        if not r["override"] and asof is not None and dated is not None and asof - dated > STALE_MONTHS:
            r["stale"] = True
    return list(rows.values())


STALE_MONTHS = 12


def _month(date: str | None) -> int | None:
    """A 'YYYY', 'YYYY-MM' or 'YYYY-MM-DD' date as a month count (None: undated)."""
    m = re.match(r"(\d{4})(?:-(\d{2}))?", date or "")
    return int(m.group(1)) * 12 + int(m.group(2) or 6) - 1 if m else None


def unrentable(rec: Recommendation, catalog: Catalog) -> list[str]:
    """GPUs the answer buys that no on-demand cloud offer in the catalog rents: no break-even for them."""
    bought = sorted({rec.table.groups[b.group].gpu for b in rec.solution.purchases
                     if not rec.table.groups[b.group].rented})
    return [gpu for gpu in bought if _cheapest_offer(catalog, gpu) is None]


def _cheapest_offer(catalog: Catalog, gpu: str) -> Offer | None:
    offers = [o for o in catalog.offers.values() if o.gpu == gpu and o.term == "on-demand"]
    return min(offers, key=lambda o: (o.price.usd, o.id)) if offers else None


def _owning_cost(rec: Recommendation, g: Group, count: GroupCount) -> tuple[float, float]:
    """(fixed USD over the horizon: capex, maintenance, colocation; electricity if busy all the time)."""
    p = rec.problem
    targets = targets_of(p)
    capex, value, power = group_costs(g, count, targets.install_usd_per_server)
    fixed = capex + targets.maintenance * value + colocation_per_watt(p) * power
    return fixed, electricity_per_watt(p) * power


def _spot_slowdown(rec: Recommendation, g: Group, gpus: int) -> float:
    """Hours of interruptible capacity per hour of the same GPUs owned, for a training job: the
    owned cluster's goodput over the spot one's (reclaims add restarts, Young 1974); 1 for serving."""
    if g.role is not Role.TRAIN:
        return 1.0
    base = rec.problem.reliability
    return goodput(gpus, base).fraction / goodput(gpus, g.reliability(base)).fraction


def break_even(rec: Recommendation, catalog: Catalog) -> list[dict[str, Any]]:
    """Per GPU type in the answer: the share of the horizon the hardware must be busy for buying
    to cost less than renting the same GPU-hours on demand.

    Buying costs F + u·E over the horizon (F: capex, maintenance, colocation; E: electricity at
    full use); renting costs u·G·H·r. They are equal at u* = F / (G·H·r − E); above u*, buy.
    """
    p = rec.problem
    hours = p.horizon_years * HOURS_PER_YEAR
    out = []
    for b in rec.solution.purchases:
        g = rec.table.groups[b.group]
        offer: Offer | None
        if g.rented:  # what buying the same GPUs in the offer's server type would cost
            offer = catalog.offers[g.offer or ""]
            server = catalog.servers[g.server]
            gpu = catalog.gpus[g.gpu]
            used = not gpu.sold_new and gpu.used_price is not None  # no longer sold new: buying means used
            usd = gpu.used_price.usd if used and gpu.used_price else gpu.price.usd
            site = bare_group(g.gpu, server, None, Role.TRAIN, gpu_usd=usd, server_usd=server.price.usd,
                              gpu_w=gpu.tdp_w, server_w=server.base_power_w)
            count = purchase(site, b.gpus)
        else:
            offer = _cheapest_offer(catalog, g.gpu)
            site, count, used = g, b, False
        if offer is None:
            continue
        fixed, energy = _owning_cost(rec, site, count)
        # renting pays for the GPUs the answer uses; buying them may mean a whole server (full_only)
        rent_full = (b.gpus if g.rented else count.gpus) * hours * offer.price.usd
        # spot capacity loses time to reclaims: the same work takes more of its hours than of owned ones
        slower = _spot_slowdown(rec, g, b.gpus) if offer.interruptible else 1.0
        rent_full *= slower
        u = fixed / (rent_full - energy) if rent_full > energy else math.inf
        busy = None
        if rec.perf is not None:  # one training job: how busy it keeps the hardware
            busy = min(1.0, rec.days * 24 / hours / slower)  # in hours of the owned hardware
        out.append({"gpu": g.gpu, "gpus": b.gpus, "owned_gpus": b.owned_gpus, "buy_gpus": count.gpus,
                    "server": site.server,
                    "chosen": "rent" if g.rented else "buy", "offer": offer.id, "buy_used": used,
                    "usd_per_gpu_hour": offer.price.usd, "buy_fixed_usd": fixed, "electricity_full_use_usd": energy,
                    "rent_full_use_usd": rent_full, "rent_hours_per_owned_hour": slower,
                    "break_even_utilisation": u if math.isfinite(u) else None,
                    "this_job_utilisation": busy})
    return out


def break_even_lines(rows: list[dict[str, Any]], horizon_years: float, unrented: Sequence[str] = ()) -> list[str]:
    lines = [f"{gpu}: no on-demand cloud offer in the catalog rents it, so there is no renting to weigh buying "
             "against" for gpu in unrented]
    for r in rows:
        u = r["break_even_utilisation"]
        buying = (f"${r['buy_fixed_usd']:,.0f} capex, maintenance and colocation, plus up to "
                  f"${r['electricity_full_use_usd']:,.0f} electricity")
        slower = r.get("rent_hours_per_owned_hour", 1.0)
        spot = f", {slower:.2f} of its hours per owned hour for its reclaims" if slower > 1.0 else ""
        renting = (f"{r['offer']} at ${r['usd_per_gpu_hour']:g}/GPU-hour (${r['rent_full_use_usd']:,.0f} busy all "
                   f"{horizon_years:g} years{spot})")
        owned = r.get("owned_gpus", 0)
        if r["chosen"] == "buy" and owned == r["gpus"]:  # nothing to buy: keeping them against renting
            buying = buying.replace("capex, ", "")
            head = f"{r['gpus']} x {r['gpu']} (owned): keeping them ({buying}) vs renting {renting}"
        elif r["chosen"] == "buy":
            mix = f" ({owned} owned, {r['gpus'] - owned} bought)" if owned else ""
            head = f"{r['gpus']} x {r['gpu']}{mix}: buying ({buying}) vs renting {renting}"
        else:
            whole = f"{r['buy_gpus']} GPUs in a {r['server']}, " if r["buy_gpus"] != r["gpus"] else ""
            instead = "buying used instead" if r.get("buy_used") else "buying instead"
            head = f"{r['gpus']} x {r['gpu']}: renting {renting} vs {instead} ({whole}{buying})"
        if u is None or u > 1:
            tail = "renting is cheaper even at 100 % utilisation"
        else:
            keep = "keeping them" if r["chosen"] == "buy" and owned == r["gpus"] else "buying"
            tail = f"{keep} pays off above {u:.0%} utilisation over the horizon"
        if r["this_job_utilisation"] is not None:
            tail += f"; this training job alone fills {r['this_job_utilisation']:.1%} of it"
        lines.append(f"{head}: {tail}.")
    return lines


def cost_lines(cost: dict[str, Any]) -> list[str]:
    """The TCO table: every term, with how it was computed."""
    parts = ", ".join(f"{k} ${v:,.0f}" for k, v in cost["capex_parts_usd"].items() if v)
    colo = (f"{cost['it_power_kw']:,.1f} kW x ${cost['colocation_usd_per_kw_month']:g}/kW-month"
            if cost["colocation_usd_per_kw_month"] else "not colocated (site.colocation)")
    rows = [
        ("capex", cost["capex_usd"], parts or "nothing bought"),
        ("rent", cost["rent_usd"], "cloud offers (in the bill of materials)" if cost["rent_usd"] else "none"),
        ("electricity", cost["electricity_usd"],
         f"{cost['it_power_kw']:,.1f} kW IT x load {cost['load_factor']:g} x PUE {cost['pue']:g} x "
         f"${cost['electricity_usd_per_kwh']:g}/kWh"),
        ("colocation", cost["colocation_usd"], colo),
        ("maintenance", cost["maintenance_usd"],
         f"{cost['maintenance_per_year']:.0%} a year of ${cost['hardware_value_usd']:,.0f} of on-site hardware "
         "(owned too)"),
    ]
    out = [f"{name:<12} {'$' + format(usd, ',.0f'):>14}  {how}" for name, usd, how in rows]
    out.append(f"{'TCO':<12} {'$' + format(cost['tco_usd'], ',.0f'):>14}  over {cost['horizon_years']:g} years")
    out.append(f"Depreciation over the horizon ${cost['depreciation_usd']:,.0f} (straight line, "
               f"{cost['amortisation_years']:g}-year life); book value at its end "
               f"${cost['book_value_at_horizon_usd']:,.0f}."
               + (f" Racks: {cost['racks']} ({cost['new_racks']} new)." if cost["racks"] else ""))
    return out


def price_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        tag = " (override)" if r["override"] else (" (assumption)" if r["assumption"] else "")
        if r.get("condition") == "used":
            tag = " (used)" + tag
        if r["kind"] == "unused":
            tag = " (override; not in this answer)"
        unit = f" {r['unit']}" if r["unit"] else ""
        kind = "" if r["kind"] == "unused" else f"{r['kind']} "
        source = r["source"].removeprefix("assumption: ") if r["assumption"] else r["source"]  # said once
        if r.get("stale"):
            tag += f" (stale: over {STALE_MONTHS} months older than the catalog's prices)"
        out.append(f"- {kind}{r['id']}: ${r['usd']:,.2f}{unit} [{r['date']}]{tag} {source}")
    return out
