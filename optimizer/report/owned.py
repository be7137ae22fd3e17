"""An account of owned hardware (issue 15, item 6): which owned GPUs the answer uses, and for those
it leaves idle, why, in numbers: what running them would cost over the horizon and what they alone
would serve at $0 capex.

Owned cards cost no capex but draw power and pay maintenance on their catalog value (and
colocation per kW where the site rents space), so the MIP leaves them idle when the same demand
is met more cheaply without them; it never leaves them idle to buy what they would do for less.
"""

from __future__ import annotations

from typing import Any

from optimizer.catalog import Catalog
from optimizer.problem import TrainWorkload
from optimizer.recommend import Recommendation, opex_per_watt, targets_of
from optimizer.report.workloads import ADP


def owned_account(rec: Recommendation, catalog: Catalog) -> list[dict[str, Any]]:
    """Per inventory line: GPUs owned, used and idle; for idle ones, the cost of running them (and
    the owned servers left empty) over the horizon (power at the problem's load and PUE,
    colocation, maintenance on their catalog value) and, for serving,
    what they alone would serve with their best replica type, or why no replica type fits them."""
    p = rec.problem
    used: dict[str, tuple[int, int]] = {}  # pool -> (owned GPUs, owned servers) in use
    for b in rec.solution.purchases:
        pool = rec.table.groups[b.group].pool
        if pool is not None:
            gpus, servers = used.get(pool, (0, 0))
            used[pool] = (gpus + b.owned_gpus, servers + b.owned_servers)
    maintenance = targets_of(p).maintenance
    out = []
    for o in p.inventory:
        gpu = catalog.gpus[o.gpu]
        n_used, servers_used = used.get(o.pool, (0, 0))
        n_used = min(n_used, o.count)
        entry: dict[str, Any] = {"gpu": o.gpu, "server": o.server, "owned": o.count, "used": n_used,
                                 "idle": o.count - n_used}
        if entry["idle"]:
            idle_servers = max(0, o.servers - servers_used)
            server = catalog.servers[o.server] if o.server else None
            watts = entry["idle"] * gpu.tdp_w + (idle_servers * server.base_power_w if server else 0.0)
            value = entry["idle"] * gpu.price.usd + (idle_servers * server.price.usd if server else 0.0)
            entry["running_cost_usd"] = watts * opex_per_watt(p) + maintenance * value
            entry.update(_alone(rec, o.pool, entry["idle"]))
            training = all(isinstance(w, TrainWorkload) for w in p.workloads)
            entry["why"] = rec.table.gpu_reasons.get(o.gpu) or _why(training, entry)
            trains = _alone_training(rec, o.pool, entry["idle"])
            if trains and not training:  # several workloads: what they would do for the training jobs too
                entry["alone_training"] = trains
                entry["why"] += "; " + "; ".join(_training_text(t) for t in trains)
        out.append(entry)
    return out


def _alone(rec: Recommendation, pool: str, idle: int) -> dict[str, Any]:
    """What ``idle`` GPUs of the pool would serve with the replica type that makes the most of
    them (output tokens/s), or, when too few for any replica, the smallest replica they lack."""
    types = [r for r in rec.table.serving if rec.table.groups[r.group].pool == pool]
    if not types:
        return {}
    best = max(types, key=lambda r: ((idle // r.gpus_per_replica) * r.tokens_per_s, -r.gpus_per_replica))
    replicas = idle // best.gpus_per_replica
    if replicas == 0:
        return {"alone_output_tokens_per_s": 0.0, "alone_replicas": 0,
                "smallest_replica_gpus": min(r.gpus_per_replica for r in types)}
    return {"alone_output_tokens_per_s": replicas * best.tokens_per_s, "alone_replicas": replicas,
            "alone_replica": f"TP={best.plan.tp} PP={best.plan.pp}{ADP if best.plan.attention_dp else ''} "
                             f"{best.plan.precision}, batch {best.plan.batch}"}


def _alone_training(rec: Recommendation, pool: str, idle: int) -> list[dict[str, Any]]:
    """Per training workload, the days ``idle`` GPUs of the pool alone would take with its fastest
    plan on them (a training job runs on one GPU type), against its deadline."""
    out = []
    for w in rec.problem.workloads:
        if not isinstance(w, TrainWorkload):
            continue
        rates = [min(c.dp_max, idle // c.gpus_per_replica) * c.replica_tokens_per_s for c in rec.table.candidates
                 if c.workload == w.name and rec.table.groups[c.group].pool == pool
                 and c.dp_min <= idle // c.gpus_per_replica]
        out.append({"workload": w.name, "days": w.tokens / max(rates) / 86400 if rates and max(rates) > 0 else None,
                    "deadline_days": w.deadline_s / 86400 if w.deadline_s else None})
    return out


def _training_text(t: dict[str, Any]) -> str:
    if t["days"] is None:
        return f"no plan for {t['workload']} (training) runs on them alone"
    window = "" if t["deadline_days"] is None else (
        f", {'past' if t['days'] > t['deadline_days'] else 'within'} its {t['deadline_days']:,.1f}-day window")
    return f"alone they would train {t['workload']} in {t['days']:,.1f} days{window}"


def _why(training: bool, e: dict[str, Any]) -> str:
    if training or "alone_output_tokens_per_s" not in e:
        return "the job runs on one GPU type, and another meets the target at less cost"
    if not e["alone_replicas"]:
        return (f"too few for one replica (the smallest that meets the targets takes "
                f"{e['smallest_replica_gpus']} GPUs); running them would cost ${e['running_cost_usd']:,.0f} "
                f"over the horizon")
    return (f"running them would cost ${e['running_cost_usd']:,.0f} over the horizon for "
            f"{e['alone_output_tokens_per_s']:,.0f} output tokens/s ({e['alone_replicas']} "
            f"replica{'s' if e['alone_replicas'] > 1 else ''} of "
            f"{e['alone_replica']}); every target is met for less without them")


def owned_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rows:
        where = f" in {r['server']}" if r["server"] else ""
        line = f"{r['used']} of {r['owned']} owned {r['gpu']}{where} used"
        if r["idle"]:
            line += f"; {r['idle']} idle: {r['why']}"
        lines.append(line + ".")
    return lines
