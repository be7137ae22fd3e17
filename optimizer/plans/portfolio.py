"""Plans for a problem with several workloads: each workload's candidates, on shared hardware.

Each workload (``Problem.workloads``) is enumerated as a problem of its own (``Problem.alone``); the tables
are merged so that workloads can use the same hardware groups. Bought and owned groups are shared
by key; rentals stay with the workload that rents them (each is billed for its own window).
Hardware is shared across kinds of work too: a single-server training plan and serving replicas
of one GPU in one server type use the same group, and both may also run on the servers of a
training cluster (a group with a fabric), where they need none of its network. Whether two
workloads may use the same GPUs depends on their windows: ``overlaps`` gives the sets of
workloads that run at the same time, and the MIP buys, per group, what the busiest of them needs.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from optimizer.catalog import Catalog
from optimizer.plans import Candidate, Group, PlanTable, ServeCandidate, enumerate_candidates
from optimizer.problem import Problem, Workload
from optimizer.problem.enums import Role


def overlaps(workloads: tuple[Workload, ...]) -> tuple[tuple[str, ...], ...]:
    """The sets of workloads running at the same moment, one per window start (the moments at
    which the set of running workloads can grow), without sets contained in others."""
    sets = []
    for p in workloads:
        running = tuple(q.name for q in workloads if q.start_s <= p.start_s < _end(q))
        sets.append(running)
    kept = [s for s in dict.fromkeys(sets) if not any(set(s) < set(t) for t in sets)]
    return tuple(sorted(kept))


def _end(w: Workload) -> float:
    return w.end_s if w.end_s is not None else math.inf


def gpus_needed(usage: dict[str, dict[str, int]], running_sets: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    """Per group, the GPUs the busiest set of simultaneous workloads uses (constraint (3)), from
    ``usage``: workload -> group -> GPUs."""
    out: dict[str, int] = {}
    for running in running_sets:
        for h in {h for w in running for h in usage.get(w, {})}:
            out[h] = max(out.get(h, 0), sum(usage.get(w, {}).get(h, 0) for w in running))
    return out


def enumerate_portfolio(problem: Problem, catalog: Catalog) -> PlanTable:
    """Every workload's candidates, keyed ``workload:candidate``, on merged hardware groups."""
    groups: dict[str, Group] = {}
    candidates: list[Candidate] = []
    serving: list[ServeCandidate] = []
    dropped: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    enumerated = pruned = 0
    for phase in problem.workloads:
        table = enumerate_candidates(problem.alone(phase), catalog)
        rekey = {}
        for key, g in sorted(table.groups.items()):
            if g.rented:
                g = replace(g, workload=phase.name)
            rekey[key] = g.key
            groups.setdefault(g.key, g)
        candidates += [replace(c, key=f"{phase.name}:{c.key}", group=rekey[c.group], workload=phase.name)
                       for c in table.candidates]
        serving += [replace(r, key=f"{phase.name}:{r.key}", group=rekey[r.group], demand=f"{phase.name}/{r.demand}",
                            workload=phase.name) for r in table.serving]
        dropped.update(table.dropped)
        enumerated += table.enumerated
        pruned += table.pruned
        for gpu, why in sorted(table.gpu_reasons.items()):
            reasons.setdefault(gpu, f"{phase.name}: {why}")
    candidates, serving = _shared(groups, candidates, serving)
    used = {c.group for c in candidates} | {r.group for r in serving}
    in_use = {groups[k].gpu for k in used}
    return PlanTable(tuple(sorted(candidates, key=lambda c: c.key)), {k: g for k, g in groups.items() if k in used},
                     dropped, {k: v for k, v in reasons.items() if k not in in_use}, enumerated, pruned,
                     tuple(sorted(serving, key=lambda r: r.key)))


def _shared(groups: dict[str, Group], candidates: list[Candidate],
            serving: list[ServeCandidate]) -> tuple[list[Candidate], list[ServeCandidate]]:
    """Put work that fits one server on every group of its GPU and server type: single-server
    training moves to the serving replicas' group (one pool of such servers), and both are copied
    onto each training cluster of the same GPU and server (keys ending '@fabric')."""
    site = {k: g for k, g in groups.items() if not g.rented}
    replicas = {(g.gpu, g.server): k for k, g in site.items() if g.fabric is None and g.role is Role.SERVE}
    clusters: dict[tuple[str, str], list[Group]] = {}
    for g in site.values():
        if g.fabric is not None:
            clusters.setdefault((g.gpu, g.server), []).append(g)
    out_c: list[Candidate] = []
    for c in candidates:
        g = groups[c.group]
        if g.rented or g.fabric is not None:
            out_c.append(c)
            continue
        home = replicas.get((g.gpu, g.server), c.group)
        out_c.append(replace(c, group=home))
        out_c += [replace(c, key=f"{c.key}@{f.fabric}", group=f.key) for f in clusters.get((g.gpu, g.server), [])]
    out_r: list[ServeCandidate] = []
    for r in serving:
        g = groups[r.group]
        out_r.append(r)
        if not g.rented:
            out_r += [replace(r, key=f"{r.key}@{f.fabric}", group=f.key) for f in clusters.get((g.gpu, g.server), [])]
    return out_c, out_r
