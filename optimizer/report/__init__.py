"""Stage 6: a recommendation as a summary, a bill of materials, text, Markdown or JSON.

Every figure printed comes from the re-checked plan and the catalog; prices carry their
source and date, and those no source gives are flagged as assumptions.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import assert_never

from optimizer.catalog import Band, Catalog
from optimizer.catalog.records import train_regime
from optimizer.milp import fabric_links
from optimizer.problem import Problem, ServeWorkload, TrainWorkload, answer_regime
from optimizer.recommend import HOURS_PER_YEAR, Recommendation
from optimizer.report.bom import BOM_COLUMNS, BomRow, _src, assumptions_used, bill_of_materials, write_bom
from optimizer.report.owned import owned_account
from optimizer.report.tco import break_even, cost_terms, prices_used, unrentable
from optimizer.report.text import acquire, network_line, render, render_text
from optimizer.report.workloads import predicted_capacity, workloads_plan

__all__ = ["BOM_COLUMNS", "BomRow", "_src", "acquire", "assumptions_used", "bill_of_materials", "network_line",
           "network_summary", "render", "render_text", "summary", "write_bom"]


def _answer_band(rec: Recommendation, catalog: Catalog) -> tuple[Band, bool, str | None]:
    """The 90 % band of the answer, whether it is the extrapolated one (a GPU it runs on borrows its
    efficiency values), and its regime. A problem with several workloads bands each in its plan."""
    p, sol, groups = rec.problem, rec.solution, rec.table.groups
    if len(p.workloads) > 1:
        return catalog.band("serve"), False, None  # the wider of the two; each workload's plan carries its own
    w = p.workload
    regime = None
    match w:
        case ServeWorkload():
            runs = tuple((groups[r.group].gpu, r.plan.precision) for r, _ in sol.replicas)
            regime = answer_regime(w.demands)
        case TrainWorkload():
            assert sol.candidate is not None
            runs = ((groups[sol.candidate.group].gpu, w.precision),)
            regime = train_regime(w.model.moe)
        case never:
            assert_never(never)
    return catalog.band_for(w.kind, w.stack, *runs, regime=regime), catalog.borrows(w.kind, w.stack, *runs), regime


def summary(rec: Recommendation, catalog: Catalog) -> dict[str, Any]:
    """Everything the report shows, JSON-ready (keys: status, objective, gap, plan, cost, bom, …)."""
    p, sol = rec.problem, rec.solution
    bom = bill_of_materials(rec, catalog)
    cost = {**cost_terms(rec, catalog), "prices_as_of": catalog.prices_as_of}
    band, borrowed, regime = _answer_band(rec, catalog)
    low, high = band.ratio(5), band.ratio(95)
    plan, sense = _plan(rec, catalog, cost, band)
    return {
        "problem": _problem_record(p),
        "status": sol.status.value,
        "objective": {"sense": sense, "value": sol.objective},
        "gap": sol.gap,
        "plan": plan,
        "cost": cost,
        "bom": [r.as_dict() for r in bom],
        "prices_used": prices_used(rec, catalog),
        "break_even": break_even(rec, catalog),
        "no_rental_offer": unrentable(rec, catalog),
        "owned": owned_account(rec, catalog),
        # towers, desktops and consumer rigs in the answer: flagged, as a data centre would not take them
        "workstations": sorted({rec.table.groups[b.group].server for b in rec.solution.purchases
                                if catalog.servers[rec.table.groups[b.group].server].workstation}),
        "solver": _solver_record(rec),
        "uncertainty": {"rows": band.rows, "source": band.source, "extrapolated": borrowed, "regime": regime,
                        "ratio_5": low, "ratio_95": high,
                        "confidence": p.confidence,
                        "planning_factor": band.ratio(100 - p.confidence) if p.confidence else 1.0},
        "verification": [c.text for c in rec.checks],
        "assumptions": assumptions_used(rec, catalog),
        "excluded_gpus": dict(sorted(rec.table.gpu_reasons.items())),
    }


def _plan(rec: Recommendation, catalog: Catalog, cost: dict[str, Any], band: Band) -> tuple[dict[str, Any], str]:
    """The plan section with its 90 % band, and the objective's sense; adds the workload's own cost
    figures to ``cost`` (per million output tokens served, or the training run's energy)."""
    p = rec.problem
    low, high = band.ratio(5), band.ratio(95)
    if len(p.workloads) > 1:
        return workloads_plan(rec, catalog), "minimise TCO (USD)"
    if isinstance(p.workload, ServeWorkload):
        plan = _serving_plan(rec)
        for cls in plan["classes"]:
            cls["capacity_band_90"] = [cls["predicted_output_tokens_per_s"] * low,
                                       cls["predicted_output_tokens_per_s"] * high]
        seconds = p.horizon_years * HOURS_PER_YEAR * 3600
        cost["usd_per_million_output_tokens"] = cost["tco_usd"] / (p.total_demand * seconds) * 1e6
        cost["output_tokens_per_usd"] = p.total_demand * seconds / cost["tco_usd"]
        return plan, "minimise TCO (USD)"
    plan = _training_plan(rec)
    plan["tokens_per_s_band_90"] = [plan["tokens_per_s"] * low, plan["tokens_per_s"] * high]
    plan["days_band_90"] = [plan["days"] / high, plan["days"] / low]
    if p.confidence:
        plan["planned_days"] = plan["days"] / band.ratio(100 - p.confidence)
    cost["training_energy_usd"] = (cost["it_power_kw"] * p.load_factor * p.pue * rec.days * 24
                                   * p.electricity_usd_per_kwh)
    return plan, "maximise tokens/s" if p.objective.maximize else "minimise TCO (USD)"


def _problem_record(p: Problem) -> dict[str, Any]:
    """The problem as the report states it: what was asked, in days, kW and milliseconds. With
    several workloads, the per-workload figures are in the plan's ``workloads``."""
    w, job = p.workloads[0], p.training
    alone = len(p.workloads) == 1
    demands = p.serving.demands if p.serving else ()
    wall = {"facility_power_cap_kw": p.facility_power_cap_w / 1e3} if p.facility_power_cap_w else {}
    return {**wall, "name": p.name, "file": str(p.path), "kind": w.kind if alone else "multi", "objective": p.objective,
            "confidence": p.confidence,
            "model": w.model_id, "tokens": job.tokens if job else 0.0,
            "deadline_days": job.deadline_s / 86400 if job and job.deadline_s else None,
            "budget_usd": p.budget_usd, "budget_covers": p.budget_covers,
            "power_cap_kw": p.power_cap_w / 1e3 if p.power_cap_w else None, "datacenter": p.datacenter,
            "allow_workstations": p.allow_workstations,
            "demands": [{"name": d.name, "input_len": d.input_len, "output_len": d.output_len,
                         "output_tokens_per_s": d.output_tokens_per_s,
                         "ttft_ms": d.ttft_s * 1e3 if d.ttft_s else None,
                         "tpot_ms": d.tpot_s * 1e3 if d.tpot_s else None, "offline": d.offline}
                        for d in demands]}


def _solver_record(rec: Recommendation) -> dict[str, Any]:
    """How the MIP was solved and how many plans it chose from (variables and constraints are the
    last program's: with one training job, that holds only the groups ``milp.screen_groups`` kept)."""
    sol, table = rec.solution, rec.table
    return {"backend": sol.backend, "status": sol.status.value, "gap": sol.gap,
            "time_limit_s": rec.problem.solver.time_limit_s,
            "variables": sol.variables, "constraints": sol.constraints,
            "candidates": len(table.candidates) + len(table.serving),
            "templates_tried": table.enumerated,
            "pruned_as_dominated": table.pruned, "dropped": dict(sorted(table.dropped.items()))}


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
        "days": rec.days, "goodput": _goodput(rec), "tokens_per_s": perf.tokens_per_s,
        "tflops_per_gpu": perf.flops_per_gpu / 1e12,
        "mfu": perf.mfu, "step_time_s": perf.step_time,
        "step_breakdown_s": dict(perf.breakdown),
        "memory_gb_per_gpu": perf.memory.total / 1e9,
        "memory_usable_gb_per_gpu": perf.memory_capacity / 1e9,
        "memory_total_gb_per_gpu": perf.memory_total / 1e9,
        "memory_headroom": rec.problem.memory_headroom,
        "memory_breakdown_gb": {k: v / 1e9 for k, v in perf.memory.breakdown().items()},
        "candidate": c.key,
        "network": network_summary(g, sol.counts),
    }


def _goodput(rec: Recommendation) -> dict[str, Any]:
    """What failures cost the training job: its goodput, the failures a day it expects, Young's
    checkpoint interval, and the rates and times assumed (problem or catalogs/facility.yaml)."""
    good, c = rec.goodput, rec.solution.candidate
    assert good is not None and c is not None  # a training answer
    group = rec.table.groups[c.group]
    r = group.reliability(rec.problem.reliability)
    spot = {"spot_reclaims_per_gpu_day": r.spot_interruptions_per_gpu_day} if group.interruptible else {}
    return {**spot,"fraction": good.fraction, "failures_per_day": good.failures_per_day,
            "checkpoint_interval_h": good.checkpoint_interval_s / 3600 if good.failures_per_day else None,
            "days_without_failures": rec.days * good.fraction,
            "interruptions_per_gpu_day": r.interruptions_per_gpu_day, "interruptions_source": r.rate_source,
            "checkpoint_minutes": r.checkpoint_s / 60,
            "restart_minutes": r.restart_s / 60}


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


def _serving_plan(rec: Recommendation) -> dict[str, Any]:
    sol = rec.solution
    replicas = []
    for (r, count), res in zip(sol.replicas, rec.replica_perf, strict=True):
        g = rec.table.groups[r.group]
        replicas.append({
            "class": r.demand, "gpu": g.gpu, "server": g.server, "offer": g.offer, "replicas": count, "tp": r.plan.tp,
            "pp": r.plan.pp, "attention_dp": r.plan.attention_dp, "precision": r.plan.precision,
            "kv_precision": r.plan.kv_precision,
            "batch": r.plan.batch, "gpus": count * r.gpus_per_replica,
            "output_tokens_per_s_each": res.output_tokens_per_s, "output_tokens_per_s": count * res.output_tokens_per_s,
            "ttft_ms": res.ttft * 1e3, "tpot_ms": res.tpot * 1e3, "memory_gb_per_gpu": res.memory_per_gpu / 1e9,
            # the engine's own share of the GPU (vLLM: gpu_memory_utilization) is what it may use
            "memory_usable_gb_per_gpu": res.memory_capacity / 1e9,
            "memory_total_gb_per_gpu": res.memory_total / 1e9,
            "candidate": r.key})
    capacity = sol.serving_capacity()
    return {"replicas": replicas,
            "classes": [{"name": d.name, "demand_output_tokens_per_s": d.output_tokens_per_s,
                         "capacity_output_tokens_per_s": capacity.get(d.name, 0.0),
                         "predicted_output_tokens_per_s": predicted_capacity(replicas, d.name)}
                        for d in rec.problem.demands],
            "gpus": sum(p.gpus for p in sol.purchases), "servers": sum(p.servers for p in sol.purchases),
            "gpu_types": sorted({rec.table.groups[p.group].gpu for p in sol.purchases})}

