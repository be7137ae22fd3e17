"""A recommendation's summary as text or Markdown (``render``), and the phrases the other reports
share (``acquire``, ``network_line``)."""

from __future__ import annotations

import json
from typing import Any

from optimizer.catalog.records import DENSE, MOE
from optimizer.report.bom import _bom_table, _money
from optimizer.report.owned import owned_lines
from optimizer.report.tco import break_even_lines, cost_lines, price_lines
from optimizer.report.workloads import ADP, memory_text, recompute_words, workloads_text


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
    if s["break_even"] or s.get("no_rental_offer"):
        lines.append(h("Buy or rent"))
        lines += break_even_lines(s["break_even"], cost["horizon_years"], s.get("no_rental_offer", []))
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
        f"(measured / predicted on {s['uncertainty']['rows']} published runs of {_models(s['uncertainty'])}"
        + (" on GPUs or stacks without calibration rows of their own, as here)." if s["uncertainty"].get("extrapolated")
           else ").")
        + (f" Planned at {p['confidence']} % confidence: {plan['planned_days']:,.1f} days."
           if p.get("confidence") else ""),
        goodput_line(plan["goodput"]),
        _cost_line(cost),
        h("Parallel plan"),
        f"TP={plan['tp']} PP={plan['pp']}"
        + (f" (interleaved x{plan['virtual_stages']})" if plan["virtual_stages"] > 1 else "")
        + (f" CP={plan['cp']}" if plan["cp"] > 1 else "")
        + (f" EP={plan['ep']}" if plan["ep"] > 1 else "")
        + f" DP={plan['dp']} ({plan['gpus_used']} GPUs used), micro-batch "
        f"{plan['micro_batch']} x {plan['micro_batches']} per step, global batch {plan['global_batch_seqs']} "
        f"sequences, {recompute_words(plan['recompute'])}, ZeRO-{plan['zero']}"
        f"{', sequence parallel' if plan['sequence_parallel'] else ''}, {plan['precision']}.",
        *([network_line(plan["network"])] if plan.get("network") else []),
        f"Memory per GPU {plan['memory_gb_per_gpu']:,.1f} of {plan['memory_usable_gb_per_gpu']:,.1f} GB usable "
        f"({plan['memory_total_gb_per_gpu']:,.1f} GB less {plan['memory_headroom']:.0%} headroom): "
        + ", ".join(f"{k} {v:,.1f}" for k, v in plan["memory_breakdown_gb"].items()) + ".",
        f"Step time {plan['step_time_s']:,.3f} s: "
        + ", ".join(f"{k} {v:,.3f}" for k, v in plan["step_breakdown_s"].items() if v > 0) + ".",
    ]


def _models(u: dict[str, Any]) -> str:
    """Whose published runs a training band comes from: MoE models' or dense ones' (bands.regime_of)."""
    return {MOE: "mixture-of-experts models", DENSE: "dense models"}.get(u.get("regime") or "", "training jobs")


def _rate_sources(g: dict[str, Any]) -> str:
    """Where the interruption rate comes from: the failures' source, and on spot capacity the
    provider's reclaims on top (an assumption of catalogs/facility.yaml, not the failures' source)."""
    spot = g.get("spot_reclaims_per_gpu_day")
    source = g.get("interruptions_source")
    if spot:
        failures = g["interruptions_per_gpu_day"] - spot
        return (f": {failures:g} failures" + (f", from {source}" if source else "")
                + f", and {spot:g} the spot provider reclaiming its capacity (an assumption)")
    return f", from {source}" if source else ""


def goodput_line(g: dict[str, Any]) -> str:
    """The failure allowance in a training answer's days (optimizer.perf.goodput)."""
    if not g["failures_per_day"]:
        return "Goodput 100 %: no failures assumed (goodput.interruptions_per_gpu_day: 0)."
    return (f"Goodput {g['fraction']:.1%}, included: the job expects {g['failures_per_day']:,.2f} failures a day "
            f"(at {g['interruptions_per_gpu_day']:g} interruptions per GPU-day" + _rate_sources(g) + "); each "
            f"costs a {g['restart_minutes']:g}-minute restart and half a checkpoint interval of lost work "
            f"(a {g['checkpoint_minutes']:g}-minute checkpoint every {g['checkpoint_interval_h']:,.1f} h); "
            f"{g['days_without_failures']:,.1f} days without failures.")


def _serving_text(s: dict[str, Any], h) -> list[str]:
    p, plan, cost = s["problem"], s["plan"], s["cost"]
    demand = "; ".join(
        f"{d['name']}: {d['output_tokens_per_s']:,.0f} output tokens/s of {d['input_len']} in / "
        f"{d['output_len']} out" + (f", TTFT ≤ {d['ttft_ms']:g} ms" if d["ttft_ms"] else "")
        + (f", TPOT ≤ {d['tpot_ms']:g} ms" if d["tpot_ms"] else "")
        + (", an offline batch (no API server)" if d["offline"] else "") for d in p["demands"])
    lines = [f"Serve {p['model']} at minimum cost. {demand}.", h("Recommendation")]
    for r in plan["replicas"]:
        where = f"rented from {r['offer']}" if r.get("offer") else f"in {r['server']}"
        lines.append(f"{r['class']}: {r['replicas']} replica(s) of {r['tp'] * r['pp']} x {r['gpu']} {where} "
                     f"(TP={r['tp']} PP={r['pp']}{ADP if r['attention_dp'] else ''}, {r['precision']} weights, "
                     f"{r['kv_precision']} KV), "
                     f"batch {r['batch']}: {r['output_tokens_per_s_each']:,.0f} output tokens/s each, "
                     f"TTFT {r['ttft_ms']:,.0f} ms, TPOT {r['tpot_ms']:,.1f} ms; {memory_text(r)}.")
    servers = f"{plan['servers']} server{'' if plan['servers'] == 1 else 's'}"
    lines.append(f"In all {plan['gpus']} GPUs ({', '.join(plan['gpu_types'])}) in {servers}; "
                 "capacity " + ", ".join(_capacity_text(c, p.get("confidence")) for c in plan["classes"])
                 + " output tokens/s.")
    lines.append(_cost_line(cost))
    lines.append(f"At the demanded rate all {cost['horizon_years']:g} years: "
                 f"${cost['usd_per_million_output_tokens']:,.3f} per million output tokens "
                 f"({cost['output_tokens_per_usd'] / 1e6:,.1f} M output tokens per dollar).")
    return lines




def plan_lines(s: dict[str, Any]) -> list[str]:
    """The recommendation as the text answer words it (layout, memory, step time and goodput, or
    each serving replica), without its headings: for the HTML report."""
    heading = "\0"
    lines = _serving_text(s, lambda t: heading) if s["problem"]["kind"] == "serve" else _training_text(
        s, lambda t: heading)
    return [line for line in lines if line != heading]


def render(s: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(s, indent=2, sort_keys=True) + "\n"
    return render_text(s, markdown=(fmt == "markdown"))


def _capacity_text(c: dict[str, Any], confidence: int | None) -> str:
    """'chat 30,051 of 30,000 (90 % band ...)'; at a confidence, the planned (pessimistic) capacity
    with the model's prediction beside it, which the band brackets."""
    band = f"90 % band {c['capacity_band_90'][0]:,.0f}-{c['capacity_band_90'][1]:,.0f}"
    head = f"{c['name']} {c['capacity_output_tokens_per_s']:,.0f} of {c['demand_output_tokens_per_s']:,.0f}"
    if confidence:
        return (f"{head} planned at {confidence} % confidence (predicted "
                f"{c['predicted_output_tokens_per_s']:,.0f}, {band})")
    return f"{head} ({band})"

