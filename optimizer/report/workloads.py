"""The report of a problem with several workloads: what each workload runs on, when, and how fast.

Every figure comes from the re-checked plans (``Recommendation.phase_perf`` and
``replica_perf``) and the solver's shared purchases; the bill of materials and the TCO are the
common report's.
"""

from __future__ import annotations

from typing import Any

from optimizer.catalog import Catalog
from optimizer.catalog.records import train_regime
from optimizer.perf.goodput import goodput
from optimizer.perf.train import TrainResult
from optimizer.problem import TrainWorkload, answer_regime
from optimizer.recommend import Recommendation

ADP = " attention data-parallel"  # after TP=… PP=… for a replica whose attention is data-parallel


def recompute_words(mode: str) -> str:
    """'full recompute', 'selective recompute', or 'no recompute' (not 'none recompute')."""
    return "no recompute" if mode == "none" else f"{mode} recompute"


def predicted_capacity(replicas: list[dict[str, Any]], name: str) -> float:
    """A class's output tokens/s as the model predicts them (the re-check of each replica type):
    what the 90 % band brackets. The capacity the MIP planned with is lower where the problem
    asks for a confidence (each rate times its band's low quantile): banding that again would
    count the uncertainty twice."""
    return sum(r["output_tokens_per_s_each"] * r["replicas"] for r in replicas if r["class"] == name)


def memory_text(r: dict[str, Any]) -> str:
    """Used / usable / total memory per GPU of a serving replica (usable: the engine's share)."""
    return (f"memory {r['memory_gb_per_gpu']:,.1f} of {r['memory_usable_gb_per_gpu']:,.1f} GB usable per GPU "
            f"({r['memory_total_gb_per_gpu']:,.1f} GB)")

def _train_entry(rec: Recommendation, catalog: Catalog, w: TrainWorkload, result: TrainResult) -> dict[str, Any]:
    """A training workload's hardware, plan, speed and memory (used / usable / total per GPU)."""
    c, dp = next((c, dp) for c, dp in rec.solution.plans if c.workload == w.name)
    g = rec.table.groups[c.group]
    good = goodput(c.gpus_per_replica * dp, g.reliability(rec.problem.reliability))
    days = w.tokens / result.tokens_per_s / good.fraction / 86400
    train_band = catalog.band_for("train", w.stack, (g.gpu, w.precision), regime=train_regime(w.model.moe))
    return dict(tokens=w.tokens, group=g.key, gpu=g.gpu, server=g.server, fabric=g.fabric,
                offer=g.offer, gpus=c.gpus_per_replica * dp, tp=c.plan.tp, pp=c.plan.pp, dp=dp * c.plan.ep,
                cp=c.plan.cp, ep=c.plan.ep, micro_batch=c.plan.micro_batch,
                micro_batches=c.plan.num_micro_batches, recompute=c.plan.recompute, zero=c.plan.zero,
                tokens_per_s=result.tokens_per_s, mfu=result.mfu, days=days,
                days_band_90=[days / train_band.ratio(95), days / train_band.ratio(5)],
                memory_gb_per_gpu=result.memory.total / 1e9,
                memory_usable_gb_per_gpu=result.memory_capacity / 1e9,
                memory_total_gb_per_gpu=result.memory_total / 1e9,
                memory_headroom=rec.problem.memory_headroom, goodput=good.fraction, candidate=c.key)


def workloads_plan(rec: Recommendation, catalog: Catalog) -> dict[str, Any]:
    """Per workload: its window, hardware and plan (training) or replicas (serving); per
    hardware group: what was bought or owned and which workloads use how many of its GPUs."""
    sol, groups = rec.solution, rec.table.groups
    perf = dict(rec.phase_perf)
    replica_perf = dict(zip((r.key for r, _ in sol.replicas), rec.replica_perf, strict=True))
    out = []
    for w in rec.problem.workloads:
        entry: dict[str, Any] = {"name": w.name, "kind": w.kind, "start_day": w.start_s / 86400,
                                 "end_day": (w.end_s or 0.0) / 86400, "model": w.model_id}
        if isinstance(w, TrainWorkload):
            entry.update(_train_entry(rec, catalog, w, perf[w.name]))
        else:
            replicas: list[dict[str, Any]] = []
            for r, n in sol.replicas:
                if r.workload != w.name:
                    continue
                g, res = groups[r.group], replica_perf[r.key]
                replicas.append({"class": r.demand.split("/", 1)[1], "group": g.key, "gpu": g.gpu, "server": g.server,
                                 "fabric": g.fabric, "offer": g.offer, "replicas": n, "tp": r.plan.tp, "pp": r.plan.pp,
                                 "attention_dp": r.plan.attention_dp, "precision": r.plan.precision,
                                 "batch": r.plan.batch, "gpus": n * r.gpus_per_replica,
                                 "output_tokens_per_s_each": res.output_tokens_per_s, "ttft_ms": res.ttft * 1e3,
                                 "tpot_ms": res.tpot * 1e3, "memory_gb_per_gpu": res.memory_per_gpu / 1e9,
                                 "memory_usable_gb_per_gpu": res.memory_capacity / 1e9,
                                 "memory_total_gb_per_gpu": res.memory_total / 1e9,
                                 "candidate": r.key})
            capacity = sol.serving_capacity()
            serve_band = catalog.band_for("serve", w.stack,
                                          *((r["gpu"], r["precision"]) for r in replicas),
                                          regime=answer_regime(w.demands))
            entry.update(replicas=replicas, classes=[
                {"name": d.name, "demand_output_tokens_per_s": d.output_tokens_per_s,
                 "capacity_output_tokens_per_s": capacity.get(f"{w.name}/{d.name}", 0.0),
                 "predicted_output_tokens_per_s": predicted,
                 "capacity_band_90": [predicted * serve_band.ratio(q) for q in (5, 95)]}
                for d in w.demands for predicted in (predicted_capacity(replicas, d.name),)])
        out.append(entry)
    usage = sol.usage()
    hardware = []
    for p in sol.purchases:
        g = groups[p.group]
        used = {w.name: usage[w.name][p.group] for w in rec.problem.workloads if p.group in usage.get(w.name, {})}
        hardware.append({"group": g.key, "gpu": g.gpu, "server": g.server, "fabric": g.fabric, "offer": g.offer,
                         "gpus": p.gpus, "servers": p.servers, "owned_gpus": p.owned_gpus,
                         "owned_servers": p.owned_servers, "used_by": used})
    return {"workloads": out, "hardware": hardware,
            "gpus": sum(p.gpus for p in sol.purchases), "servers": sum(p.servers for p in sol.purchases)}


def _where(item: dict[str, Any]) -> str:
    if item.get("offer"):
        return f"rented from {item['offer']}"
    return f"in {item['server']}" + (f" on {item['fabric']}" if item.get("fabric") else "")


def workloads_text(s: dict[str, Any], h, acquire) -> list[str]:
    """The several-workload part of the text report; ``acquire`` words a purchase."""
    plan = s["plan"]
    lines = [f"{len(plan['workloads'])} workloads over {s['cost']['horizon_years']:g} years; goal: the lowest TCO "
             "that meets every deadline and demand.", h("Workloads")]
    for w in plan["workloads"]:
        head = f"{w['name']} ({w['kind']}, days {w['start_day']:g}-{w['end_day']:,.0f}, {w['model']}):"
        if w["kind"] == "train":
            extra = "".join(f" {k.upper()}={w[k]}" for k in ("cp", "ep") if w[k] > 1)
            lines.append(f"{head} {w['tokens']:.3g} tokens on {w['gpus']} x {w['gpu']} {_where(w)}, TP={w['tp']} "
                         f"PP={w['pp']}{extra} DP={w['dp']}, micro-batch {w['micro_batch']} x {w['micro_batches']}, "
                         f"{recompute_words(w['recompute'])}, ZeRO-{w['zero']}: {w['days']:,.1f} days at "
                         f"{w['tokens_per_s']:,.0f} tokens/s (MFU {w['mfu']:.1%}; 90 % band "
                         f"{w['days_band_90'][0]:,.1f}-{w['days_band_90'][1]:,.1f} days) of "
                         f"{w['end_day'] - w['start_day']:,.1f} allowed.")
            continue
        lines.append(head)
        for r in w["replicas"]:
            lines.append(f"  {r['class']}: {r['replicas']} replica(s) of {r['tp'] * r['pp']} x {r['gpu']} {_where(r)} "
                         f"(TP={r['tp']} PP={r['pp']}{ADP if r['attention_dp'] else ''}, {r['precision']}), "
                         f"batch {r['batch']}: "
                         f"{r['output_tokens_per_s_each']:,.0f} output tokens/s each, TTFT {r['ttft_ms']:,.0f} ms, "
                         f"TPOT {r['tpot_ms']:,.1f} ms; {memory_text(r)}.")
        lines += [f"  {c['name']}: capacity {c['capacity_output_tokens_per_s']:,.0f} of "
                  f"{c['demand_output_tokens_per_s']:,.0f} output tokens/s (90 % band "
                  f"{c['capacity_band_90'][0]:,.0f}-{c['capacity_band_90'][1]:,.0f})." for c in w["classes"]]
    lines.append(h("Hardware, shared over time"))
    for g in plan["hardware"]:
        used = ", ".join(f"{name} {gpus}" for name, gpus in g["used_by"].items())
        lines.append(f"{acquire(g)}" + (f" on {g['fabric']}" if g.get("fabric") and not g.get("offer") else "")
                     + f". GPUs used by: {used}.")
    lines.append("Workloads whose windows overlap use GPUs of their own; one after another, they reuse them.")
    return lines
