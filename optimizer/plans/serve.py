"""Serving replica types: GPU × server × TP × PP × weight format, one per request class.

Each runs at the largest batch that meets its class's TTFT and TPOT limits. A replica stays in
one server and its GPU count (TP × PP) is a power of two that divides the server's slots, so
replicas of different sizes always pack: GPUs ≤ slots × servers is then exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

from optimizer.catalog import Catalog, Gpu
from optimizer.errors import ProblemError
from optimizer.perf.params import ServeParams
from optimizer.perf.serve import ServePlan, ServeResult, max_batch, serve
from optimizer.perf.serve_arrays import batch_at_slo
from optimizer.perf.specs import Hardware, ModelSpec
from optimizer.plans.groups import Group, build_groups, group_affordable, group_reason, licensed_gpus, no_group_reason
from optimizer.plans.table import PlanTable, ServeCandidate, prune_serving
from optimizer.problem import Demand, Problem, ServeWorkload, confidence_factor, tp_fits
from optimizer.problem.enums import Role


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _math_supported(gpu: Gpu, precision: str) -> bool:
    """fp8 needs fp8 tensor cores and NVFP4 fp4 ones (Blackwell); MXFP4, int8 and int4 weights also
    run weight-only on 16-bit tensor cores (Marlin-style kernels), as fp16 does."""
    if precision == "fp8":
        return gpu.fp8_tflops is not None
    if precision == "nvfp4":
        return getattr(gpu, "fp4_tflops", None) is not None
    if precision == "bf16":
        return gpu.bf16_tflops is not None
    return gpu.fp16_tflops is not None or gpu.bf16_tflops is not None


def enumerate_serving(problem: Problem, catalog: Catalog) -> PlanTable:
    """Every replica type that fits and meets a class's latency limits; reasons for the rest."""
    w = problem.serving
    if w is None:
        raise ProblemError(f"{problem.name}: enumerate_serving plans a problem whose one workload serves")
    out: list[ServeCandidate] = []
    groups: dict[str, Group] = {}
    dropped: Counter[str] = Counter()
    gpu_reasons: dict[str, str] = {}
    tried = 0
    for gpu_id, gpu in licensed_gpus(problem, catalog, dropped, gpu_reasons):
        precisions = [p for p in w.precisions if _math_supported(gpu, p)]
        if not precisions:
            gpu_reasons[gpu_id] = f"precision: no tensor cores for {', '.join(w.precisions)}"
            dropped["precision"] += 1
            continue
        usable = [g for g in build_groups(problem, catalog, gpu_id, role=Role.SERVE) if group_affordable(problem, g)]
        if not usable:
            every = build_groups(problem, catalog, gpu_id, role=Role.SERVE)
            gpu_reasons[gpu_id] = (group_reason(problem, min(every, key=lambda g: g.min_power_w)) if every
                                   else no_group_reason(problem, catalog, gpu_id))
            dropped["budget/power"] += 1
            continue
        best_miss: dict[str, tuple[float, str]] = {}
        before = len(out)
        effs = {p: catalog.serve_params(gpu_id, p, w.stack) for p in precisions}
        rated: dict[tuple[str, ServePlan, str], Rated] = {}  # a replica on a server rates alike in every group
        for group in usable:
            hw = catalog.hardware(gpu_id, group.server, None)
            for plan in _layouts(problem, w, catalog, group, precisions):
                for d in w.demands:
                    tried += 1
                    key = (group.server, plan, d.name)
                    if key not in rated:
                        rated[key] = _rate(problem, w.model, catalog, gpu_id, hw, effs[plan.precision], plan, d)
                    found = _candidate(group, d, rated[key], dropped, best_miss)
                    if found is not None:
                        out.append(found)
                        groups[group.key] = group
        if len(out) == before:
            gpu_reasons[gpu_id] = (best_miss.get("latency") or best_miss.get("memory") or (0, "no replica type"))[1]
    kept, pruned = prune_serving(out)
    used = {c.group for c in kept}
    return PlanTable((), {k: v for k, v in groups.items() if k in used}, dropped, gpu_reasons, tried, pruned,
                     tuple(kept))


def _layouts(problem: Problem, w: ServeWorkload, catalog: Catalog, group: Group,
             precisions: list[str]) -> Iterator[ServePlan]:
    """The replica layouts the search grid allows in ``group``: TP × PP a power of two dividing its
    slots, each weight format. For an MoE model at TP > 1 also with attention data-parallel over the
    TP group (each GPU keeps its own requests' KV cache and the attention weights whole; the experts
    stay split), as TensorRT-LLM and SGLang serve DeepSeek, Qwen3-MoE and gpt-oss."""
    m = w.model
    traits = catalog.serve_plan_traits(group.gpu, w.stack)
    for tp in problem.search.tp:
        for pp in problem.search.pp:
            mp = tp * pp
            if not (_power_of_two(mp) and group.slots % mp == 0 and pp <= m.layers and tp_fits(m, tp, serving=True)):
                continue
            for precision in precisions:
                plan = ServePlan(tp=tp, pp=pp, precision=precision, kv_precision=w.kv_precision, **traits)
                yield plan
                if m.moe and tp > 1:
                    yield replace(plan, attention_dp=True)


@dataclass(frozen=True)
class Rated:
    """A replica layout for a request class on one server: at the largest batch within its latency
    limits (``result``, with the plan at that batch), or why none (``miss``: kind, value, reason)."""

    plan: ServePlan
    factor: float
    result: ServeResult | None
    miss: tuple[str, float, str] | None = None


def _rate(problem: Problem, m: ModelSpec, catalog: Catalog, gpu_id: str, hw: Hardware, eff: ServeParams,
          plan: ServePlan, d: Demand) -> Rated:
    """``plan`` for request class ``d`` on ``hw`` with the engine's parameters ``eff``, at the largest
    batch within its latency limits, or the closest miss."""
    plan = replace(plan, input_len=d.input_len, output_len=d.output_len, online=not d.offline)
    tp, pp, precision = plan.tp, plan.pp, plan.precision
    # a confident plan: rates down, latencies up (more so where the values are borrowed, and at
    # maximum load, which is predicted less well than at a batch)
    factor = confidence_factor(problem, catalog, gpu_id, precision, d)
    if max_batch(m, hw, plan) < 1:
        need = serve(m, hw, replace(plan, batch=1), eff).memory_per_gpu / 1e9
        return Rated(plan, factor, None, ("memory", need, f"memory: needs {need:,.1f} GB per GPU for one {d.name} "
                                          f"sequence at TP={tp} PP={pp} {precision}; has "
                                          f"{catalog.gpus[gpu_id].memory_bytes / 1e9:,.1f} GB"))
    batch = batch_at_slo(m, hw, plan, eff, d.tpot_s and d.tpot_s * factor, d.ttft_s and d.ttft_s * factor)
    if batch < 1:
        one = serve(m, hw, replace(plan, batch=1), eff)
        return Rated(plan, factor, None, ("latency", one.tpot, _latency_reason(d, one, tp, pp, precision)))
    plan = replace(plan, batch=batch)
    return Rated(plan, factor, serve(m, hw, plan, eff))


def _candidate(group: Group, d: Demand, rated: Rated, dropped: Counter[str],
               best_miss: dict[str, tuple[float, str]]) -> ServeCandidate | None:
    """The rated replica as a candidate of ``group``, or None (counted in ``dropped``, the closest
    miss in ``best_miss``)."""
    if rated.result is None:
        assert rated.miss is not None
        kind, value, reason = rated.miss
        dropped[kind] += 1
        _note(best_miss, kind, value, reason)
        return None
    plan, r, factor = rated.plan, rated.result, rated.factor
    layout = f"tp{plan.tp}-pp{plan.pp}" + ("-adp" if plan.attention_dp else "")
    return ServeCandidate(f"{group.key}/{d.name}/{layout}-{plan.precision}-b{plan.batch}", group.key, d.name,
                          plan, r.output_tokens_per_s * factor, r.ttft / factor, r.tpot / factor,
                          r.memory_per_gpu / 1e9)


def _note(best: dict[str, tuple[float, str]], kind: str, value: float, reason: str) -> None:
    if kind not in best or value < best[kind][0]:
        best[kind] = (value, reason)


def _latency_reason(d: Demand, one: ServeResult, tp: int, pp: int, precision: str) -> str:
    parts = []
    if d.tpot_s is not None and one.tpot > d.tpot_s:
        parts.append(f"TPOT {one.tpot * 1e3:,.1f} ms > {d.tpot_s * 1e3:g} ms")
    if d.ttft_s is not None and one.ttft > d.ttft_s:
        parts.append(f"TTFT {one.ttft * 1e3:,.0f} ms > {d.ttft_s * 1e3:g} ms")
    return (f"latency: even one {d.name} request at a time misses its limit at TP={tp} PP={pp} {precision} "
            f"({', '.join(parts)})")
