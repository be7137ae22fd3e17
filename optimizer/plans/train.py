"""Training plan templates: GPU × server × fabric × TP × PP × micro-batch × micro-batches
× recompute × ZeRO, each with a range ``[dp_min, dp_max]`` for the data-parallel degree that the
MIP chooses. Throughput per replica is a lower bound over the range (communication at
``dp_max``, the sharded optimizer step at ``dp_min``), so ``dp × replica_tokens_per_s`` never
over-promises; the solve is re-checked at the chosen dp afterwards. Multi-server ranges are split
into bands of node counts so the pessimism stays small.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from optimizer.catalog import Catalog, Gpu
from optimizer.errors import ProblemError
from optimizer.perf.goodput import goodput
from optimizer.perf.memory import training_memory
from optimizer.perf.specs import Hardware, ModelSpec, TrainPlan, evolve
from optimizer.perf.train import TrainTerms, step_time, train_terms
from optimizer.plans.groups import (
    Group,
    build_groups,
    gpu_limits,
    group_affordable,
    group_reason,
    licensed_gpus,
    max_gpus,
    no_group_reason,
)
from optimizer.plans.table import Candidate, PlanTable, prune_dominated
from optimizer.plans.train_bands import NODE_BANDS, Setup, Templates, candidate, group_candidates, templates
from optimizer.problem import Problem, TrainWorkload, confidence_factor, tp_fits


def min_dp_that_fits(m: ModelSpec, plan: TrainPlan, capacity: float, reserved: float, dp_cap: int) -> int | None:
    """Smallest dp (in units of ep replicas) whose memory fits (it falls with dp under ZeRO), or None."""
    def fits(dp: int) -> bool:
        return training_memory(m, evolve(plan, dp=dp * plan.ep), reserved).total <= capacity
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


def _dp_range(problem: Problem, w: TrainWorkload, group: Group, mp: int, seqs: int,
              dp_fit: int) -> tuple[int, int] | None:
    """The data-parallel degrees the batch limits, the GPU bound and the group's scope allow."""
    lo = max(dp_fit, math.ceil(w.min_global_batch / seqs), math.ceil(group.rent_min_gpus / mp))
    hi = min(w.max_global_batch // seqs, max_gpus(problem, group) // mp)
    if group.fabric is None:
        hi = min(hi, group.slots // mp)
    else:
        lo = max(lo, group.slots // mp + 1)
    return (lo, hi) if lo <= hi else None


def _fits(m: ModelSpec, plan: TrainPlan, capacity: float, reserved: float, dp: int) -> bool:
    """Interleaving keeps more micro-batches in flight: recheck memory at the smallest dp."""
    return training_memory(m, evolve(plan, dp=dp), reserved).total <= capacity


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


def enumerate_plans(problem: Problem, catalog: Catalog, reference: bool = False) -> PlanTable:
    """Every template that fits, with drop reasons for the rest, dominated ones pruned.

    At a planning confidence, every rate is the model's times the calibration quantile. The bands
    of each hardware group are evaluated over arrays (``plans.train_bands``); ``reference=True``
    builds them one plan at a time with the scalar model instead, which gives the same table."""
    w = problem.training
    if w is None:
        raise ProblemError(f"{problem.name}: enumerate_plans plans a problem whose one workload trains")
    reserved = catalog.efficiency.reserved_memory
    candidates: list[Candidate] = []
    groups: dict[str, Group] = {}
    dropped: Counter[str] = Counter()
    gpu_reasons: dict[str, str] = {}
    enumerated = skipped = 0
    for gpu_id, gpu in licensed_gpus(problem, catalog, dropped, gpu_reasons):
        if gpu.tflops(w.precision) is None:
            gpu_reasons[gpu_id] = f"precision: no {w.precision} tensor cores"
            dropped["precision"] += 1
            continue
        gpu_groups = build_groups(problem, catalog, gpu_id)
        if not gpu_groups:
            gpu_reasons[gpu_id] = no_group_reason(problem, catalog, gpu_id)
            continue
        usable = [g for g in gpu_groups if group_affordable(problem, g)]
        if not usable:
            g = min(gpu_groups, key=lambda g: g.min_power_w)
            gpu_reasons[gpu_id] = group_reason(problem, g)
            dropped["budget/power"] += 1
            continue
        before = len(candidates)
        reason_counts: Counter[str] = Counter()
        ceiling = catalog.mfu_ceiling(gpu_id, w.precision)
        setup = Setup(catalog.train_params(gpu_id, w.precision, w.stack), reserved,
                      catalog.train_plan_traits(gpu_id, w.stack), ceiling.value if ceiling else math.inf)
        groups.update((g.key, g) for g in usable)
        n, best_memory, strictly = _gpu_candidates(problem, w, catalog, usable, setup,
                                                   confidence_factor(problem, catalog, gpu_id), reference,
                                                   candidates, reason_counts)
        enumerated += n
        dropped.update(reason_counts)
        skipped += strictly
        if len(candidates) == before:
            gpu_reasons[gpu_id] = _memory_reason(gpu, best_memory, reason_counts, problem.memory_headroom) \
                + _spend_cap(problem, usable, best_memory)
    kept, pruned = prune_dominated(candidates)
    kept = [with_memory(c, w.model, reserved) for c in kept]
    used = {c.group for c in kept}
    return PlanTable(tuple(kept), {k: v for k, v in groups.items() if k in used}, dropped,
                     gpu_reasons, enumerated, pruned + skipped)


def _gpu_candidates(problem: Problem, w: TrainWorkload, catalog: Catalog, usable: list[Group], setup: Setup,
                    factor: float, reference: bool, out: list[Candidate], reasons: Counter[str]
                    ) -> tuple[int, tuple[float, str] | None, int]:
    """Append the candidates of one GPU's groups to ``out``; return (templates tried, least memory
    that failed, bands dropped as strictly dominated before they were built). The templates do not
    depend on the group, so they are made once per GPU."""
    enumerated, best_memory, skipped = 0, None, 0
    fit_cache: dict[FitKey, int | None] = {}
    by_capacity: dict[float, Templates] = {}
    for group in usable:
        hw = catalog.hardware(group.gpu, group.server, group.fabric)
        if reference:
            n, c = _group_candidates(problem, w, group, hw, setup, out, reasons, fit_cache, factor)
        else:
            capacity = hw.device.memory * (1.0 - problem.memory_headroom)
            if capacity not in by_capacity:
                by_capacity[capacity] = templates(problem, w, capacity, setup.reserved, setup.traits)
            n, c, built, strictly = group_candidates(
                problem, w, group, (hw, hw.oversubscribed(group.oversubscription)),
                setup, by_capacity[capacity], reasons, factor)
            out.extend(built)
            skipped += strictly
        enumerated += n
        if c is not None and (best_memory is None or c[0] < best_memory[0]):
            best_memory = c
    return enumerated, best_memory, skipped


def _spend_cap(problem: Problem, usable: list[Group], best: tuple[float, str] | None) -> str:
    """Where memory ran out at the GPU count a limit allows (the budget, power cap, a unit or rental
    cap: ZeRO shards the state over the data-parallel GPUs, so more of them would need less each),
    say so and name the limits that set the count."""
    g = max(usable, key=lambda g: max_gpus(problem, g))
    most = max_gpus(problem, g)
    if best is None or most >= problem.max_gpus:
        return ""
    spend = " and ".join(name for name, n in gpu_limits(problem, g).items() if n <= most)
    return (f"; at most {most:,} of them within the {spend} (ZeRO shards the training state over the GPUs, "
            f"so more GPUs need less memory each: the {spend} is the limit)")


def _memory_reason(gpu: Gpu, best: tuple[float, str] | None, counts: Counter[str], headroom: float) -> str:
    if best is not None:
        has = gpu.memory_bytes / 1e9
        # enough decimals that the need and what is usable never print alike
        digits = 1 if f"{best[0]:.1f}" != f"{has * (1 - headroom):.1f}" else 2
        usable = f" ({has * (1 - headroom):,.{digits}f} usable at {headroom:.0%} headroom)" if headroom else ""
        return f"memory: needs {best[0]:,.{digits}f} GB per GPU even at {best[1]}; has {has:,.1f} GB{usable}"
    if counts:
        return "no plan: " + ", ".join(f"{k} ({v})" for k, v in counts.most_common())
    return "no plan in the search grid"


# what a plan's least data-parallel degree that fits depends on: memory per GPU and the plan's shape
# (capacity, tp, pp, cp, ep, micro-batch, recompute, ZeRO stage, dp cap)
FitKey = tuple[float, int, int, int, int, int, str, int, int]


def _group_candidates(problem: Problem, w: TrainWorkload, group: Group, hw: Hardware, setup: Setup,  # noqa: C901 (debt: split it, issue 14)
                      out: list[Candidate], reasons: Counter[str], fit_cache: dict[FitKey, int | None],
                      factor: float) -> tuple[int, tuple[float, str] | None]:
    """Append the group's candidates to ``out``; return (templates tried, least memory that failed)."""
    m, search = w.model, problem.search
    capacity = hw.device.memory * (1.0 - problem.memory_headroom)  # the share fragmentation leaves
    multi = group.fabric is not None
    links = (hw, hw.oversubscribed(group.oversubscription))  # within one leaf, and across leaves
    tried = 0
    least: tuple[float, str] | None = None
    eps = [e for e in search.ep if e == 1 or (m.moe and e <= m.experts)] if m.moe else [1]
    for tp, cp, ep in ((t, c, e) for t in search.tp for c in search.cp for e in eps):
        if tp * cp > group.slots or not tp_fits(m, tp) or w.seq_len % cp:
            continue
        for pp in search.pp:
            if pp > m.layers:
                continue
            mp = tp * pp * cp * ep  # the MIP scales by units of ep replicas
            dp_cap = max(1, problem.max_gpus // mp)
            if not multi and mp > group.slots:
                continue
            for b in search.micro_batch:
                for rc in search.recompute:
                    for zero in search.zero:
                        tried += 1
                        base = TrainPlan(tp=tp, pp=pp, dp=ep, micro_batch=b, num_micro_batches=pp,
                                         recompute=rc, sequence_parallel=tp > 1, zero=zero,
                                         precision=w.precision, seq_len=w.seq_len, cp=cp, ep=ep,
                                         **setup.traits)
                        key = (capacity, tp, pp, cp, ep, b, rc, zero, dp_cap)
                        if key not in fit_cache:  # memory does not depend on server or fabric
                            fit_cache[key] = min_dp_that_fits(m, base, capacity, setup.reserved, dp_cap)
                        dp_fit = fit_cache[key]
                        if dp_fit is None:
                            reasons["memory"] += 1
                            need = training_memory(m, replace(base, dp=dp_cap * ep), setup.reserved).total / 1e9
                            if least is None or need < least[0]:
                                least = (need, f"TP={tp} PP={pp} CP={cp} micro-batch {b}, {rc} recompute, "
                                                 f"ZeRO-{zero}")
                            continue
                        for per_stage in search.micro_batches_per_stage:
                            if _dp_range(problem, w, group, mp, b * per_stage * pp * ep, dp_fit) is None:
                                reasons["batch/size"] += 1
                                continue
                            for v in search.virtual_stages:
                                if v > 1 and (pp == 1 or pp * v > m.layers):
                                    continue  # interleaving needs PP and a layer per chunk (uneven is fine)
                                plan = evolve(base, num_micro_batches=per_stage * pp, virtual_stages=v)
                                if v > 1 and not _fits(m, plan, capacity, setup.reserved, dp_fit):
                                    continue
                                _add_bands(problem, w, group, links, setup, plan, dp_fit, out, reasons, factor)
    return tried, least


def _add_bands(problem: Problem, w: TrainWorkload, group: Group, links: tuple[Hardware, Hardware], setup: Setup,
               plan: TrainPlan, dp_fit: int, out: list[Candidate], reasons: Counter[str], factor: float = 1.0) -> None:
    """One candidate per node-count band of the plan's data-parallel range, rated at its slowest
    step and the goodput of its largest job (failures grow with the GPUs; memory was checked by
    the caller). The reference for ``train_bands``, which rates every band of a group at once."""
    mp = plan.unit_gpus
    span = _dp_range(problem, w, group, mp, plan.micro_batch * plan.num_micro_batches * plan.ep, dp_fit)
    if span is None:
        reasons["batch/size"] += 1
        return
    lo, hi = span
    per_node = max(1, group.slots // mp)
    for band_lo, band_hi in _dp_bands(lo, hi, per_node, group.fabric is not None):
        good = goodput(band_hi * mp, group.reliability(problem.reliability)).fraction
        rate = band_rate(w, group, links, setup, plan, band_lo, band_hi, factor * good)
        if rate is None:
            reasons["mfu ceiling"] += 1  # faster than any published run on this GPU: a model error, not a plan
            continue
        out.append(candidate(group, plan, band_lo, band_hi, rate))


def band_rate(w: TrainWorkload, group: Group, links: tuple[Hardware, Hardware], setup: Setup, plan: TrainPlan,
              band_lo: int, band_hi: int, scale: float) -> float | None:
    """A band's tokens/s per unit of ep replicas at its slowest step, times ``scale`` (goodput and
    confidence), or None where the plan would run above the GPU's MFU ceiling.

    Communication grows with dp and the sharded optimizer step shrinks with it (∝ 1/dp under
    ZeRO ≥ 1), so the slowest step anywhere in the band is at most step(dp_max) with dp_min's
    optimizer step (which the straggler allowance scales too). The band's fastest end (least dp)
    runs at a higher MFU: checked exactly where the work no dp changes (compute, launches, tensor,
    context, expert and pipeline sends) alone is above the ceiling."""
    mp = plan.unit_gpus
    terms = _terms_at(w, links, group, plan, band_hi)
    parts = step_time(evolve(terms, optimizer_bytes=terms.optimizer_bytes * band_hi / band_lo)
                      if plan.zero >= 1 else terms, setup.params)
    step = float(parts.total)
    ceiling = setup.mfu_ceiling
    floor = float(parts.compute + parts.layer_overhead + parts.tp_comm + parts.cp_comm + parts.ep_comm
                  + parts.pp_comm)
    if _mfu(terms, step, band_hi * mp) > ceiling or (
            band_lo < band_hi and _mfu(terms, floor, band_hi * mp) > ceiling
            and _mfu(*_at_dp(w, links, group, plan, band_lo, setup)) > ceiling):
        return None
    return float(terms.tokens_per_step) / band_hi / step * scale


def _mfu(terms: TrainTerms, step: float, gpus: int) -> float:
    """A plan's MFU: model FLOPs over the dense peak of its precision (as TrainResult.mfu), to hold
    against the highest published dense runs reached on its GPU (``catalog.mfu_ceiling``): above it
    the plan is faster than any published run, a model error rather than an answer."""
    return float(terms.model_flops_per_token * terms.tokens_per_step) / gpus / step / float(terms.peak)


def _terms_at(w: TrainWorkload, links: tuple[Hardware, Hardware], group: Group, plan: TrainPlan,
              dp: int) -> TrainTerms:
    """The plan's terms at ``dp`` (units of ep replicas), across leaves once its servers span them."""
    servers = math.ceil(dp * plan.unit_gpus / group.slots)
    return train_terms(w.model, links[1] if group.spans_leaves(servers) else links[0], evolve(plan, dp=dp * plan.ep))


def _at_dp(w: TrainWorkload, links: tuple[Hardware, Hardware], group: Group, plan: TrainPlan, dp: int,
           setup: Setup) -> tuple[TrainTerms, float, int]:
    """Terms, step time and GPUs of the plan at ``dp`` (its band's fastest end, for the MFU guard)."""
    terms = _terms_at(w, links, group, plan, dp)
    return terms, float(step_time(terms, setup.params).total), dp * plan.unit_gpus


def with_memory(c: Candidate, m: ModelSpec, reserved: float) -> Candidate:
    """The candidate with its memory per GPU at dp_min (computed only for survivors)."""
    mem = training_memory(m, replace(c.plan, dp=c.dp_min * c.plan.ep), reserved)
    return replace(c, memory_gb=mem.total / 1e9)
