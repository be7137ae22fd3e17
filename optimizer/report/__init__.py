"""Stage 6: a recommendation as a summary, a bill of materials, text, Markdown or JSON.

Every figure printed comes from the re-checked plan and the catalog; prices carry their
source and date, and those no source gives are flagged as assumptions.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer.catalog import Band, Catalog, Price
from optimizer.errors import ProblemError
from optimizer.milp import fabric_links, rent_cost
from optimizer.problem import answer_regime
from optimizer.recommend import HOURS_PER_YEAR, Recommendation, targets_of
from optimizer.report.owned import owned_account, owned_lines
from optimizer.report.tco import break_even, break_even_lines, cost_lines, cost_terms, price_lines, prices_used
from optimizer.report.workloads import predicted_capacity, workloads_plan, workloads_text

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


def bill_of_materials(rec: Recommendation, catalog: Catalog) -> list[BomRow]:  # noqa: C901 (debt: split it, issue 14)
    """One row per item bought for every hardware group: GPUs, server platforms, NICs, switches,
    installation and racks; owned parts at $0 (they draw power); rentals at their cost."""
    rows: list[BomRow] = []
    p = rec.problem
    for bought in rec.solution.purchases:
        g = rec.table.groups[bought.group]
        gpu, server = catalog.gpus[g.gpu], catalog.servers[g.server]
        if g.rented:
            offer = catalog.offers[g.offer or ""]
            job = next((c for c, _ in rec.solution.plans if c.group == g.key), None)
            tokens = targets_of(p).job_tokens(job.workload) if job else p.tokens
            usd = rent_cost(g, bought.gpus, tokens, job) / bought.gpus
            billed = (f"{g.rent_hours:,.0f} h ({offer.term})" if g.rent_hours
                      else f"{usd / offer.price.usd:,.1f} h of the job (on demand)")
            rows.append(BomRow("rent", offer.id, f"{offer.provider} {offer.name}: ${offer.price.usd:g}/GPU-hour x "
                               f"{billed}", bought.gpus, usd, 0.0, _src(offer.price)))
            continue
        owned = " (owned)"
        if bought.owned_gpus:
            rows.append(BomRow("owned", gpu.id, gpu.name + owned, bought.owned_gpus, 0.0, gpu.tdp_w, "inventory"))
        if bought.gpus > bought.owned_gpus:
            rows.append(BomRow("gpu", gpu.id, gpu.name, bought.gpus - bought.owned_gpus, gpu.price.usd, gpu.tdp_w,
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
        if g.fabric is None:
            continue
        fabric = catalog.fabrics[g.fabric]
        switch = catalog.switches[fabric.switch]
        owned_nics = bought.owned_servers if g.owned_nics else 0
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
    costs = rec.solution.costs
    if p.racks is not None and costs is not None and costs.new_racks:
        facts = catalog.facility.racks
        price = Price(usd=p.racks.usd, date=facts.usd.date or "", source=facts.usd.source,
                      assumption=facts.usd.assumption)
        rows.append(BomRow("rack", "rack", f"{p.racks.units}U rack for {p.racks.kw / 1e3:g} kW",
                           costs.new_racks, p.racks.usd, 0.0, _src(price)))
    return [r for r in rows if r.quantity > 0]


def _answer_band(rec: Recommendation, catalog: Catalog) -> tuple[Band, bool]:
    """The 90 % band of the answer, and whether it is the extrapolated one (a GPU it runs on
    borrows its efficiency values). A problem with several workloads bands each in its plan."""
    p, sol, groups = rec.problem, rec.solution, rec.table.groups
    if p.phases:
        return catalog.band(p.kind), False
    regime = None
    if p.kind == "serve":
        runs = tuple((groups[r.group].gpu, r.plan.precision) for r, _ in sol.replicas)
        regime = answer_regime(p.demands)
    else:
        assert sol.candidate is not None
        runs = ((groups[sol.candidate.group].gpu, p.precision),)
    borrowed = catalog.borrows(p.kind, p.stack, *runs)
    return catalog.band(p.kind, borrowed, regime), borrowed


def summary(rec: Recommendation, catalog: Catalog) -> dict[str, Any]:
    """Everything the report shows, JSON-ready (keys: status, objective, gap, plan, cost, bom, …)."""
    p, sol = rec.problem, rec.solution
    bom = bill_of_materials(rec, catalog)
    cost = {**cost_terms(rec, catalog), "prices_as_of": catalog.prices_as_of}
    band, borrowed = _answer_band(rec, catalog)
    low, high = band.ratio(5), band.ratio(95)
    if p.phases:
        plan = workloads_plan(rec, catalog)
        sense = "minimise TCO (USD)"
    elif p.kind == "serve":
        plan = _serving_plan(rec)
        for cls in plan["classes"]:
            cls["capacity_band_90"] = [cls["predicted_output_tokens_per_s"] * low,
                                       cls["predicted_output_tokens_per_s"] * high]
        seconds = p.horizon_years * HOURS_PER_YEAR * 3600
        cost["usd_per_million_output_tokens"] = cost["tco_usd"] / (p.total_demand * seconds) * 1e6
        cost["output_tokens_per_usd"] = p.total_demand * seconds / cost["tco_usd"]
        sense = "minimise TCO (USD)"
    else:
        plan = _training_plan(rec)
        plan["tokens_per_s_band_90"] = [plan["tokens_per_s"] * low, plan["tokens_per_s"] * high]
        plan["days_band_90"] = [plan["days"] / high, plan["days"] / low]
        if p.confidence:
            plan["planned_days"] = plan["days"] / band.ratio(100 - p.confidence)
        cost["training_energy_usd"] = (cost["it_power_kw"] * p.load_factor * p.pue * rec.days * 24
                                       * p.electricity_usd_per_kwh)
        sense = "maximise tokens/s" if p.objective == "min_time" else "minimise TCO (USD)"
    return {
        "problem": {"name": p.name, "file": str(p.path), "kind": p.kind, "objective": p.objective,
                    "confidence": p.confidence,
                    "model": p.model_id, "tokens": p.tokens,
                    "deadline_days": p.deadline_s / 86400 if p.deadline_s else None,
                    "budget_usd": p.budget_usd, "budget_covers": p.budget_covers,
                    "power_cap_kw": p.power_cap_w / 1e3 if p.power_cap_w else None, "datacenter": p.datacenter,
                    "allow_workstations": p.allow_workstations,
                    "demands": [{"name": d.name, "input_len": d.input_len, "output_len": d.output_len,
                                 "output_tokens_per_s": d.output_tokens_per_s,
                                 "ttft_ms": d.ttft_s * 1e3 if d.ttft_s else None,
                                 "tpot_ms": d.tpot_s * 1e3 if d.tpot_s else None} for d in p.demands]},
        "status": sol.status.value,
        "objective": {"sense": sense, "value": sol.objective},
        "gap": sol.gap,
        "plan": plan,
        "cost": cost,
        "bom": [r.as_dict() for r in bom],
        "prices_used": prices_used(rec, catalog),
        "break_even": break_even(rec, catalog),
        "owned": owned_account(rec, catalog),
        # towers, desktops and consumer rigs in the answer: flagged, as a data centre would not take them
        "workstations": sorted({rec.table.groups[b.group].server for b in rec.solution.purchases
                                if catalog.servers[rec.table.groups[b.group].server].workstation}),
        "solver": {"backend": sol.backend, "status": sol.status.value, "gap": sol.gap,
                   "time_limit_s": p.solver.time_limit_s,
                   "variables": sol.variables, "constraints": sol.constraints,
                   "candidates": len(rec.table.candidates) + len(rec.table.serving),
                   "templates_tried": rec.table.enumerated,
                   "pruned_as_dominated": rec.table.pruned, "dropped": dict(sorted(rec.table.dropped.items()))},
        "uncertainty": {"rows": band.rows, "source": band.source, "extrapolated": borrowed,
                        "ratio_5": low, "ratio_95": high,
                        "confidence": p.confidence,
                        "planning_factor": band.ratio(100 - p.confidence) if p.confidence else 1.0},
        "verification": list(rec.checks),
        "assumptions": assumptions_used(rec, catalog),
        "excluded_gpus": dict(sorted(rec.table.gpu_reasons.items())),
    }


def _training_plan(rec: Recommendation) -> dict[str, Any]:
    sol, perf = rec.solution, rec.perf
    assert sol.candidate is not None and sol.counts is not None and perf is not None
    c = sol.candidate
    g = rec.table.groups[c.group]
    plan = c.plan
    return {
        "gpu": g.gpu, "gpus": sol.counts.gpus, "gpus_used": plan.unit_gpus * sol.dp,
        "server": g.server, "servers": sol.counts.servers, "fabric": g.fabric, "offer": g.offer,
        "owned_gpus": sol.counts.owned_gpus, "owned_servers": sol.counts.owned_servers,
        "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "ep": plan.ep, "virtual_stages": plan.virtual_stages,
        "dp": sol.dp * plan.ep,
        "micro_batch": plan.micro_batch,
        "micro_batches": plan.num_micro_batches,
        "global_batch_seqs": plan.micro_batch * plan.num_micro_batches * sol.dp * plan.ep,
        "recompute": plan.recompute,
        "sequence_parallel": plan.sequence_parallel, "zero": plan.zero, "precision": plan.precision,
        "days": rec.days, "tokens_per_s": perf.tokens_per_s, "tflops_per_gpu": perf.flops_per_gpu / 1e12,
        "mfu": perf.mfu, "step_time_s": perf.step_time,
        "step_breakdown_s": dict(perf.breakdown),
        "memory_gb_per_gpu": perf.memory.total / 1e9,
        "memory_breakdown_gb": {k: v / 1e9 for k, v in perf.memory.breakdown().items()},
        "candidate": c.key,
        "network": network_summary(g, sol.counts),
    }


def network_summary(g, count) -> dict[str, Any] | None:
    """The fabric of a purchase: ports, leaves and spines, the leaf port split, links."""
    if g.fabric is None or g.rented:
        return None
    links, uplinks = fabric_links(g, count)
    return {"fabric": g.fabric, "ports_per_server": g.ports_per_server, "server_links": links,
            "leaf_switches": count.leaf_switches, "spine_switches": count.spine_switches,
            "leaf_ports_down": g.leaf_down, "leaf_ports_up": g.leaf_up,
            "oversubscription": g.oversubscription if count.spine_switches else 1.0, "uplinks": uplinks,
            "switch_ports": g.switch_ports,
            "two_tier_max_servers": g.switch_ports * g.leaf_down // g.ports_per_server}


def network_line(net: dict[str, Any]) -> str:
    """One sentence on how the fabric is built (and whether two tiers suffice)."""
    head = (f"Network {net['fabric']}: {net['ports_per_server']} port(s) per server, "
            f"{net['server_links']} server links")
    if not net["spine_switches"]:
        return f"{head} on one {net['switch_ports']}-port switch."
    ratio = "non-blocking" if net["oversubscription"] == 1 else f"{net['oversubscription']:.3g}:1 oversubscribed"
    line = (f"{head} on {net['leaf_switches']} leaf + {net['spine_switches']} spine switches (each leaf "
            f"{net['leaf_ports_down']} ports down, {net['leaf_ports_up']} up: {ratio}), {net['uplinks']} "
            "leaf-spine links.")
    if net["server_links"] > net["two_tier_max_servers"] * net["ports_per_server"]:
        line += (f" This exceeds a two-tier fat tree ({net['two_tier_max_servers']} servers at most): a third "
                 "switch tier is needed, and its switches and links are not priced here.")
    return line


def _serving_plan(rec: Recommendation) -> dict[str, Any]:
    sol = rec.solution
    replicas = []
    for (r, count), res in zip(sol.replicas, rec.replica_perf, strict=True):
        g = rec.table.groups[r.group]
        replicas.append({
            "class": r.demand, "gpu": g.gpu, "server": g.server, "offer": g.offer, "replicas": count, "tp": r.plan.tp,
            "pp": r.plan.pp, "precision": r.plan.precision, "kv_precision": r.plan.kv_precision,
            "batch": r.plan.batch, "gpus": count * r.gpus_per_replica,
            "output_tokens_per_s_each": res.output_tokens_per_s, "output_tokens_per_s": count * res.output_tokens_per_s,
            "ttft_ms": res.ttft * 1e3, "tpot_ms": res.tpot * 1e3, "memory_gb_per_gpu": res.memory_per_gpu / 1e9,
            "candidate": r.key})
    capacity = sol.serving_capacity()
    return {"replicas": replicas,
            "classes": [{"name": d.name, "demand_output_tokens_per_s": d.output_tokens_per_s,
                         "capacity_output_tokens_per_s": capacity.get(d.name, 0.0),
                         "predicted_output_tokens_per_s": predicted_capacity(replicas, d.name)}
                        for d in rec.problem.demands],
            "gpus": sum(p.gpus for p in sol.purchases), "servers": sum(p.servers for p in sol.purchases),
            "gpu_types": sorted({rec.table.groups[p.group].gpu for p in sol.purchases})}


def assumptions_used(rec: Recommendation, catalog: Catalog) -> list[str]:  # noqa: C901 (debt: split it, issue 14)
    """The figures behind this answer that no source gives (prices and efficiency factors)."""
    out: list[str] = []
    # the kind, number format and stack of each workload a group runs (several workloads: their own)
    problems = {ph.name: ph.problem for ph in rec.problem.phases} or {"": rec.problem}
    runs: dict[str, set[tuple[str, str, str | None]]] = {}
    for name, groups in rec.solution.usage().items():
        p = problems[name]
        for group in groups:
            runs.setdefault(group, set()).update(
                ("training", p.precision, p.stack) if p.kind == "train" else ("serving", fmt, p.stack)
                for fmt in ((p.precision,) if p.kind == "train" else p.serve_precisions))
    for bought in rec.solution.purchases:
        g = rec.table.groups[bought.group]
        gpu, server = catalog.gpus[g.gpu], catalog.servers[g.server]
        for kind, precision, stack in sorted(runs.get(bought.group, ()), key=str):
            gaps = catalog.resolve(kind, gpu.id, precision, stack).extrapolated
            line = (f"{gpu.id} efficiency: no {kind} calibration rows for {' and '.join(gaps)}; borrowed "
                    "values (catalogs/efficiency.yaml), wider band")
            if gaps and line not in out:
                out.append(line)
        for what, price in ((gpu.id, gpu.price), (server.id, server.price)):
            if price.assumption:
                out.append(f"{what} price ${price.usd:,.0f}: {price.source}")
        link = catalog.links[gpu.link]
        if link.assumption and bought.gpus > 1:
            out.append(f"{link.id} link efficiency {link.efficiency:.0%} and latency {link.latency_us:g} us: "
                       f"{link.source}")
        if g.fabric is not None:
            fabric = catalog.fabrics[g.fabric]
            if fabric.assumption:
                out.append(f"{fabric.id} efficiency {fabric.efficiency:.0%}: {fabric.source}")
            if fabric.nic is not None and catalog.nics[fabric.nic].price.assumption:
                out.append(f"{fabric.nic} price: {catalog.nics[fabric.nic].price.source}")
            switch = catalog.switches[fabric.switch]
            if switch.price.assumption:
                out.append(f"{switch.id} price: {switch.price.source}")
            for cable_id in (fabric.server_cable, fabric.switch_cable):
                if cable_id is not None and catalog.cables[cable_id].price.assumption:
                    out.append(f"{cable_id} price: {catalog.cables[cable_id].price.source}")
    return list(dict.fromkeys(out))


def _money(x: float) -> str:
    return f"${x:,.0f}"


def render_text(s: dict[str, Any], markdown: bool = False) -> str:
    p, cost, solver = s["problem"], s["cost"], s["solver"]
    h = (lambda t: f"\n## {t}\n") if markdown else (lambda t: f"\n{t}\n{'-' * len(t)}")
    lines = [f"# gpuopt: {p['name']}" if markdown else f"gpuopt: {p['name']}"]
    if p["kind"] == "multi":
        lines += workloads_text(s, h, acquire)
        lines.append(_cost_line(cost))
    else:
        lines += _serving_text(s, h) if p["kind"] == "serve" else _training_text(s, h)
    lines.append(h("Bill of materials"))
    lines += _bom_table(s["bom"], markdown)
    if s["workstations"]:
        where = ("the site is not a data centre" if not p.get("datacenter") else
                 "allowed by site.allow_workstations" if p.get("allow_workstations") else "owned, already on site")
        lines.append(f"Workstation chassis: {', '.join(s['workstations'])} (towers or consumer rigs, not "
                     f"rack-mounted; {where}).")
    lines.append(h(f"Total cost of ownership over {cost['horizon_years']:g} years"))
    lines += [f"    {line}" if markdown and i < 6 else line for i, line in enumerate(cost_lines(cost))]
    if s["owned"]:
        lines.append(h("Owned hardware"))
        lines += owned_lines(s["owned"])
    if s["break_even"]:
        lines.append(h("Buy or rent"))
        lines += break_even_lines(s["break_even"], cost["horizon_years"])
    lines.append(h("Prices used"))
    lines += price_lines(s["prices_used"])
    lines.append(h("Solver"))
    gap = "n/a" if solver["gap"] is None else f"{solver['gap']:.2e}"
    lines += [
        f"{solver['backend']}: {solver['status']}, gap {gap} (time limit {solver['time_limit_s']:g} s); "
        f"{solver['candidates']} candidate plans after pruning "
        f"{solver['pruned_as_dominated']} dominated; dropped before the solve: "
        + (", ".join(f"{k} {v}" for k, v in solver["dropped"].items()) or "none") + ".",
        "Re-checked without the solver: " + "; ".join(s["verification"]) + ".",
    ]
    if s["excluded_gpus"]:
        lines.append(h("GPUs ruled out before the solve"))
        lines += [f"- {gpu}: {why}" for gpu, why in s["excluded_gpus"].items()]
    lines.append(h("Assumptions"))
    lines.append(f"Prices as of {cost['prices_as_of']} (catalog); "
                 f"electricity ${cost['electricity_usd_per_kwh']:g}/kWh, "
                 f"load factor {cost['load_factor']:g}. Bill-of-materials rows marked * have no "
                 "published price: get a quote.")
    if s["assumptions"]:
        lines.append("This answer rests on figures no source gives (override them in catalogs/):")
        lines += [f"- {a}" for a in s["assumptions"]]
    return "\n".join(lines) + "\n"


def _cost_line(cost: dict[str, Any]) -> str:
    rent = f"; rent {_money(cost['rent_usd'])}" if cost["rent_usd"] else ""
    return (f"Capex {_money(cost['capex_usd'])}{rent}; electricity {_money(cost['opex_usd_per_year'])}/year; "
            f"TCO over {cost['horizon_years']:g} years {_money(cost['tco_usd'])}; IT power "
            f"{cost['it_power_kw']:,.1f} kW ({cost['facility_power_kw']:,.1f} kW with PUE {cost['pue']:g}).")


def acquire(plan: dict[str, Any]) -> str:
    """'Buy 64 x h100-sxm in 8 x hgx-hopper-8', 'Rent …' or 'Use 8 owned and buy 8 more …'."""
    if plan.get("offer"):
        return f"Rent {plan['gpus']} x {plan['gpu']} from {plan['offer']}"
    owned, servers_owned = plan.get("owned_gpus", 0), plan.get("owned_servers", 0)
    if not owned:
        return f"Buy {plan['gpus']} x {plan['gpu']} in {plan['servers']} x {plan['server']}"
    new = plan["gpus"] - owned
    where = (f"{plan['servers']} x {plan['server']} ({servers_owned} owned)" if servers_owned
             else f"{plan['servers']} x {plan['server']}")
    return (f"Use {owned} owned {plan['gpu']}" + (f" and buy {new} more" if new else " (nothing to buy)")
            + f", in {where}")


def _training_text(s: dict[str, Any], h) -> list[str]:
    p, plan, cost = s["problem"], s["plan"], s["cost"]
    goal = ("fastest training within " + (f"a {_money(p['budget_usd'])} {p['budget_covers']} budget"
            if p["budget_usd"] else "the power cap")) if p["objective"] == "min_time" \
        else f"lowest TCO that trains within {p['deadline_days']:,.1f} days"
    net = plan["fabric"] or "no network (one server)"
    return [
        f"{p['model']} on {p['tokens']:.3g} tokens; goal: {goal}.",
        h("Recommendation"),
        f"{acquire(plan)}, network: {net}.",
        f"Predicted training time {plan['days']:,.1f} days at {plan['tokens_per_s']:,.0f} tokens/s "
        f"({plan['tflops_per_gpu']:,.0f} TFLOP/s per GPU, MFU {plan['mfu']:.1%}); 90 % band "
        f"{plan['days_band_90'][0]:,.1f}-{plan['days_band_90'][1]:,.1f} days "
        f"(measured / predicted on {s['uncertainty']['rows']} published runs"
        + (" of GPUs or stacks without calibration rows of their own, as here)." if s["uncertainty"].get("extrapolated")
           else ").")
        + (f" Planned at {p['confidence']} % confidence: {plan['planned_days']:,.1f} days."
           if p.get("confidence") else ""),
        _cost_line(cost),
        h("Parallel plan"),
        f"TP={plan['tp']} PP={plan['pp']}"
        + (f" (interleaved x{plan['virtual_stages']})" if plan["virtual_stages"] > 1 else "")
        + (f" CP={plan['cp']}" if plan["cp"] > 1 else "")
        + (f" EP={plan['ep']}" if plan["ep"] > 1 else "")
        + f" DP={plan['dp']} ({plan['gpus_used']} GPUs used), micro-batch "
        f"{plan['micro_batch']} x {plan['micro_batches']} per step, global batch {plan['global_batch_seqs']} "
        f"sequences, {plan['recompute']} recompute, ZeRO-{plan['zero']}"
        f"{', sequence parallel' if plan['sequence_parallel'] else ''}, {plan['precision']}.",
        *([network_line(plan["network"])] if plan.get("network") else []),
        f"Memory per GPU {plan['memory_gb_per_gpu']:,.1f} GB: "
        + ", ".join(f"{k} {v:,.1f}" for k, v in plan["memory_breakdown_gb"].items()) + ".",
        f"Step time {plan['step_time_s']:,.3f} s: "
        + ", ".join(f"{k} {v:,.3f}" for k, v in plan["step_breakdown_s"].items() if v > 0) + ".",
    ]


def _serving_text(s: dict[str, Any], h) -> list[str]:
    p, plan, cost = s["problem"], s["plan"], s["cost"]
    demand = "; ".join(
        f"{d['name']}: {d['output_tokens_per_s']:,.0f} output tokens/s of {d['input_len']} in / "
        f"{d['output_len']} out" + (f", TTFT ≤ {d['ttft_ms']:g} ms" if d["ttft_ms"] else "")
        + (f", TPOT ≤ {d['tpot_ms']:g} ms" if d["tpot_ms"] else "") for d in p["demands"])
    lines = [f"Serve {p['model']} at minimum cost. {demand}.", h("Recommendation")]
    for r in plan["replicas"]:
        where = f"rented from {r['offer']}" if r.get("offer") else f"in {r['server']}"
        lines.append(f"{r['class']}: {r['replicas']} replica(s) of {r['tp'] * r['pp']} x {r['gpu']} {where} "
                     f"(TP={r['tp']} PP={r['pp']}, {r['precision']} weights, {r['kv_precision']} KV), "
                     f"batch {r['batch']}: {r['output_tokens_per_s_each']:,.0f} output tokens/s each, "
                     f"TTFT {r['ttft_ms']:,.0f} ms, TPOT {r['tpot_ms']:,.1f} ms.")
    lines.append(f"In all {plan['gpus']} GPUs ({', '.join(plan['gpu_types'])}) in {plan['servers']} servers; "
                 "capacity " + ", ".join(_capacity_text(c, p.get("confidence")) for c in plan["classes"])
                 + " output tokens/s.")
    lines.append(_cost_line(cost))
    lines.append(f"At the demanded rate all {cost['horizon_years']:g} years: "
                 f"${cost['usd_per_million_output_tokens']:,.3f} per million output tokens "
                 f"({cost['output_tokens_per_usd'] / 1e6:,.1f} M output tokens per dollar).")
    return lines


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


def render(s: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(s, indent=2, sort_keys=True) + "\n"
    return render_text(s, markdown=(fmt == "markdown"))


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


def _capacity_text(c: dict[str, Any], confidence: int | None) -> str:
    """'chat 30,051 of 30,000 (90 % band ...)'; at a confidence, the planned (pessimistic) capacity
    with the model's prediction beside it, which the band brackets."""
    band = f"90 % band {c['capacity_band_90'][0]:,.0f}-{c['capacity_band_90'][1]:,.0f}"
    head = f"{c['name']} {c['capacity_output_tokens_per_s']:,.0f} of {c['demand_output_tokens_per_s']:,.0f}"
    if confidence:
        return (f"{head} planned at {confidence} % confidence (predicted "
                f"{c['predicted_output_tokens_per_s']:,.0f}, {band})")
    return f"{head} ({band})"

