"""Stage 4: enumerate candidate plans, drop what cannot run (keeping why), prune dominated ones.

A candidate is a *template*: GPU × server × fabric × TP × PP × micro-batch × micro-batches
× recompute × ZeRO, with a range ``[dp_min, dp_max]`` for the data-parallel degree that the
MIP chooses. Throughput per replica is a lower bound over the range (communication at
``dp_max``, the sharded optimizer step at ``dp_min``), so ``dp × replica_tokens_per_s`` never
over-promises; the solve is re-checked at the
chosen dp afterwards. Multi-server ranges are split into bands of node counts so the
pessimism stays small.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

from optimizer.catalog import Catalog
from optimizer.perf.memory import training_memory
from optimizer.perf.specs import Hardware, TrainPlan
from optimizer.perf.train import optimizer_time, train_step
from optimizer.problem import Problem

NODE_BANDS = (2, 8, 32, 128, 512, 2048, 8192, 32768)


@dataclass(frozen=True)
class Group:
    """One hardware choice: a GPU in a server type, on a fabric (None: a single server)."""

    gpu: str
    server: str
    fabric: str | None
    slots: int
    full_only: bool
    gpu_usd: float
    server_usd: float
    gpu_w: float
    server_w: float
    ports_per_server: int  # switch ports each server uses (0 without fabric)
    port_usd: float  # NIC cost per port (incl. cable where the catalog says so)
    port_w: float
    switch_ports: int
    switch_usd: float
    switch_w: float

    @property
    def key(self) -> str:
        return f"{self.gpu}/{self.server}/{self.fabric or 'single-node'}"

    @property
    def min_capex(self) -> float:
        gpus = self.slots if self.full_only else 1
        return gpus * self.gpu_usd + self.server_usd

    @property
    def min_power_w(self) -> float:
        gpus = self.slots if self.full_only else 1
        return gpus * self.gpu_w + self.server_w


@dataclass(frozen=True)
class Candidate:
    """A plan template; the MIP picks one and its integer data-parallel degree."""

    key: str
    group: str
    plan: TrainPlan  # dp is dp_max, where throughput was evaluated
    dp_min: int
    dp_max: int
    replica_tokens_per_s: float
    memory_gb: float  # per GPU at dp_min

    @property
    def gpus_per_replica(self) -> int:
        return self.plan.tp * self.plan.pp


@dataclass(frozen=True)
class PlanTable:
    """What the solver sees: candidates, the hardware groups they use, and what was dropped."""

    candidates: tuple[Candidate, ...]
    groups: dict[str, Group]
    dropped: Counter = field(default_factory=Counter)  # reason class → templates
    gpu_reasons: dict[str, str] = field(default_factory=dict)  # gpu id → why it has no candidate
    enumerated: int = 0
    pruned: int = 0


def build_groups(problem: Problem, catalog: Catalog, gpu_id: str) -> list[Group]:
    groups = []
    gpu = catalog.gpus[gpu_id]
    for server in catalog.servers_for(gpu_id):
        if server.id in problem.exclude_servers:
            continue
        fabrics: list[str | None] = [None]
        fabrics += [f for f in server.fabrics if f not in problem.exclude_fabrics]
        for fid in fabrics:
            ports = port_usd = port_w = 0.0
            switch_ports, switch_usd, switch_w = 0, 0.0, 0.0
            if fid is not None:
                fabric = catalog.fabrics[fid]
                ports, _ = catalog.fabric_ports(fabric)
                if fabric.nic is not None:
                    nic = catalog.nics[fabric.nic]
                    port_usd, port_w = nic.price.usd / nic.ports, nic.power_w / nic.ports
                switch = catalog.switches[fabric.switch]
                switch_ports, switch_usd, switch_w = switch.ports, switch.price.usd, switch.power_w
            groups.append(Group(gpu_id, server.id, fid, server.slots, server.full_only, gpu.price.usd,
                                server.price.usd, gpu.tdp_w, server.base_power_w, int(ports), port_usd,
                                port_w, switch_ports, switch_usd, switch_w))
    return groups


def _min_dp_that_fits(problem: Problem, plan: TrainPlan, capacity: float, reserved: float, dp_cap: int) -> int | None:
    """Smallest dp whose memory fits (memory falls with dp under ZeRO), or None."""
    def fits(dp: int) -> bool:
        return training_memory(problem.model, replace(plan, dp=dp), reserved).total <= capacity
    if plan.zero == 0 or dp_cap <= 1:
        return 1 if fits(1) else None
    if not fits(dp_cap):
        return None
    lo, hi = 1, dp_cap
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _dp_bands(lo: int, hi: int, per_node: int, multi_node: bool) -> list[tuple[int, int]]:
    """Split [lo, hi] at node-count boundaries so each band's worst case is close to its best."""
    if not multi_node:
        return [(lo, hi)] if lo <= hi else []
    bands, start = [], lo
    for nodes in NODE_BANDS:
        end = min(hi, nodes * per_node)
        if end >= start:
            bands.append((start, end))
            start = end + 1
    if start <= hi:
        bands.append((start, hi))
    return bands


def enumerate_plans(problem: Problem, catalog: Catalog) -> PlanTable:
    """Every template that fits, with drop reasons for the rest, dominated ones pruned."""
    eff = catalog.efficiency
    candidates: list[Candidate] = []
    groups: dict[str, Group] = {}
    dropped: Counter = Counter()
    gpu_reasons: dict[str, str] = {}
    enumerated = 0
    for gpu_id in problem.gpus:
        gpu = catalog.gpus[gpu_id]
        if problem.datacenter and not gpu.datacenter_license:
            gpu_reasons[gpu_id] = "licence: the GeForce driver EULA forbids data-centre deployment"
            dropped["licence"] += 1
            continue
        if gpu.tflops(problem.precision) is None:
            gpu_reasons[gpu_id] = f"precision: no {problem.precision} tensor cores"
            dropped["precision"] += 1
            continue
        gpu_groups = build_groups(problem, catalog, gpu_id)
        if not gpu_groups:
            gpu_reasons[gpu_id] = "no server in the catalog (or allowed by the problem) takes it"
            continue
        usable = [g for g in gpu_groups if _group_affordable(problem, g)]
        if not usable:
            g = min(gpu_groups, key=lambda g: g.min_power_w)
            gpu_reasons[gpu_id] = _group_reason(problem, g)
            dropped["budget/power"] += 1
            continue
        before = len(candidates)
        reason_counts: Counter = Counter()
        best_memory: tuple[float, str] | None = None
        fit_cache: dict = {}
        for group in usable:
            groups[group.key] = group
            hw = catalog.hardware(gpu_id, group.server, group.fabric)
            n, c = _group_candidates(problem, group, hw, eff, candidates, reason_counts, fit_cache)
            enumerated += n
            if c is not None and (best_memory is None or c[0] < best_memory[0]):
                best_memory = c
        dropped.update(reason_counts)
        if len(candidates) == before:
            gpu_reasons[gpu_id] = _memory_reason(gpu, best_memory, reason_counts)
    kept, pruned = prune_dominated(candidates)
    kept = [with_memory(c, problem, eff.reserved_memory) for c in kept]
    used = {c.group for c in kept}
    return PlanTable(tuple(kept), {k: v for k, v in groups.items() if k in used}, dropped,
                     gpu_reasons, enumerated, pruned)


def max_gpus(problem: Problem, g: Group) -> int:
    """Most GPUs of this group any feasible answer can use.

    n GPUs cost at least n·(GPU + server/slots) and draw at least n·(GPU + server/slots) watts,
    so the budget (capex ≤ TCO) and the power cap bound n; a valid bound keeps pruning exact.
    """
    n = problem.max_gpus
    if problem.budget_usd is not None:
        n = min(n, int(problem.budget_usd // (g.gpu_usd + g.server_usd / g.slots)))
    if problem.power_cap_w is not None:
        n = min(n, int(problem.power_cap_w // (g.gpu_w + g.server_w / g.slots)))
    return max(n, 0)


def _group_affordable(problem: Problem, g: Group) -> bool:
    if problem.power_cap_w is not None and g.min_power_w > problem.power_cap_w:
        return False
    return not (problem.budget_usd is not None and problem.budget_covers == "capex"
                and g.min_capex > problem.budget_usd)


def _group_reason(problem: Problem, g: Group) -> str:
    if problem.power_cap_w is not None and g.min_power_w > problem.power_cap_w:
        return (f"power: one {g.server} server needs {g.min_power_w / 1e3:,.1f} kW, "
                f"cap {problem.power_cap_w / 1e3:,.1f} kW")
    return f"budget: the smallest purchase ({g.server}) costs ${g.min_capex:,.0f}, budget ${problem.budget_usd:,.0f}"


def _memory_reason(gpu, best: tuple[float, str] | None, counts: Counter) -> str:
    if best is not None:
        return (f"memory: needs {best[0]:,.1f} GB per GPU even at {best[1]}; has {gpu.memory_gb:,.0f} GB")
    if counts:
        return "no plan: " + ", ".join(f"{k} ({v})" for k, v in counts.most_common())
    return "no plan in the search grid"


def _group_candidates(problem: Problem, group: Group, hw: Hardware, eff, out: list[Candidate],
                      reasons: Counter, fit_cache: dict) -> tuple[int, tuple[float, str] | None]:
    """Append the group's candidates to ``out``; return (templates tried, least memory that failed)."""
    m, search = problem.model, problem.search
    capacity = hw.device.memory
    multi = group.fabric is not None
    tried = 0
    least: tuple[float, str] | None = None
    for tp in search.tp:
        if tp > group.slots or m.heads % tp or (m.kv_heads % tp and tp % m.kv_heads):
            continue
        for pp in search.pp:
            if pp > m.layers:
                continue
            mp = tp * pp
            dp_cap = max(1, problem.max_gpus // mp)
            if not multi and mp > group.slots:
                continue
            for b in search.micro_batch:
                for rc in search.recompute:
                    for zero in search.zero:
                        tried += 1
                        base = TrainPlan(tp=tp, pp=pp, dp=1, micro_batch=b, num_micro_batches=pp,
                                         recompute=rc, sequence_parallel=tp > 1, zero=zero,
                                         precision=problem.precision, seq_len=problem.seq_len)
                        key = (capacity, tp, pp, b, rc, zero, dp_cap)
                        if key not in fit_cache:  # memory does not depend on server or fabric
                            fit_cache[key] = _min_dp_that_fits(problem, base, capacity, eff.reserved_memory, dp_cap)
                        dp_fit = fit_cache[key]
                        if dp_fit is None:
                            reasons["memory"] += 1
                            need = training_memory(m, replace(base, dp=dp_cap), eff.reserved_memory).total / 1e9
                            if least is None or need < least[0]:
                                least = (need, f"TP={tp} PP={pp} micro-batch {b}, {rc} recompute, ZeRO-{zero}")
                            continue
                        for factor in search.micro_batches_per_stage:
                            _add_bands(problem, group, hw, eff, replace(base, num_micro_batches=factor * pp),
                                       dp_fit, out, reasons)
    return tried, least


def _add_bands(problem: Problem, group: Group, hw: Hardware, eff, plan: TrainPlan, dp_fit: int,
               out: list[Candidate], reasons: Counter) -> None:
    mp = plan.tp * plan.pp
    seqs = plan.micro_batch * plan.num_micro_batches
    lo = max(dp_fit, math.ceil(problem.min_global_batch / seqs))
    hi = min(problem.max_global_batch // seqs, max_gpus(problem, group) // mp)
    per_node = max(1, group.slots // mp)
    if group.fabric is None:
        hi = min(hi, group.slots // mp)
    else:
        lo = max(lo, group.slots // mp + 1)
    if lo > hi:
        reasons["batch/size"] += 1
        return
    for band_lo, band_hi in _dp_bands(lo, hi, per_node, group.fabric is not None):
        worst = replace(plan, dp=band_hi)
        result = train_step(problem.model, hw, worst, eff)
        # Communication grows with dp and the sharded optimizer step shrinks with it, so the
        # slowest step anywhere in the band is at most: step(dp_max) with dp_min's optimizer.
        step = result.step_time + (optimizer_time(problem.model, replace(plan, dp=band_lo), hw, eff)
                                   - optimizer_time(problem.model, worst, hw, eff))
        key = (f"{group.key}/tp{plan.tp}-pp{plan.pp}-mb{plan.micro_batch}x{plan.num_micro_batches}"
               f"-{plan.recompute}-z{plan.zero}/dp{band_lo}-{band_hi}")
        out.append(Candidate(key, group.key, worst, band_lo, band_hi,
                             result.tokens_per_step / band_hi / step, 0.0))


def dominates(a: Candidate, b: Candidate) -> bool:
    """True when every GPU count ``b`` can use, ``a`` can use too, at no less throughput.

    Same hardware group; ``a``'s GPUs per replica divide ``b``'s (k = ratio), so ``b`` at dp
    uses the GPUs of ``a`` at k·dp; ``a``'s dp range covers k·[b.dp_min, b.dp_max]; and ``a``
    yields at least as many tokens/s per GPU. Then any MIP solution using ``b`` is matched by
    one using ``a`` with the same GPUs, servers, network, cost and power, so pruning is exact.
    """
    if a.group != b.group or b.gpus_per_replica % a.gpus_per_replica:
        return False
    k = b.gpus_per_replica // a.gpus_per_replica
    return (a.dp_min <= k * b.dp_min and a.dp_max >= k * b.dp_max
            and a.replica_tokens_per_s / a.gpus_per_replica >= b.replica_tokens_per_s / b.gpus_per_replica)


def prune_dominated(candidates: list[Candidate]) -> tuple[list[Candidate], int]:
    """Keep only candidates no other candidate dominates (ties keep the first key)."""
    buckets: dict[str, list[Candidate]] = {}
    for c in candidates:
        buckets.setdefault(c.group, []).append(c)
    kept: list[Candidate] = []
    for bucket in buckets.values():
        bucket.sort(key=lambda c: (-c.replica_tokens_per_s / c.gpus_per_replica, c.gpus_per_replica,
                                   c.dp_min, -c.dp_max, c.key))
        survivors: list[Candidate] = []
        for c in bucket:
            if not any(dominates(a, c) for a in survivors):
                survivors.append(c)
        kept.extend(survivors)
    kept.sort(key=lambda c: c.key)
    return kept, len(candidates) - len(kept)


def with_memory(c: Candidate, problem: Problem, reserved: float) -> Candidate:
    """The candidate with its memory per GPU at dp_min (computed only for survivors)."""
    mem = training_memory(problem.model, replace(c.plan, dp=c.dp_min), reserved)
    return replace(c, memory_gb=mem.total / 1e9)
