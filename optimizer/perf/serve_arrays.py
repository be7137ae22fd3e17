"""A serving replica at every batch at once: ``serve_terms`` over an array of batches, and the
largest batch within latency limits found from it (issue 16: the planner asks this of every
replica layout, and the one-batch-at-a-time bisection was most of serving's enumeration).

``perf.serve`` is the reference: the fields that vary with the batch are its formulas, written
with the same operations in the same order over an array, and the rest are taken from it, so the
two agree to the bit (``tests/test_perf_arrays.py``). Powers and per-width GEMM sums that numpy
could round differently go through the scalar functions, once per distinct value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from optimizer.perf import model as shape
from optimizer.perf.comm import collectives_per_layer, p2p_time, tp_allreduce_parts
from optimizer.perf.params import ServeParams
from optimizer.perf.serve import (
    PREFILL_BATCH,
    ServeTerms,
    serve_terms,
    serve_time,
)
from optimizer.perf.serve_memory import (
    decode_cache_bytes,
    decode_weight_bytes,
    max_batch,
    replicated_attention_bytes,
    unshared_kv_factor,
)
from optimizer.perf.specs import ACT_BYTES, Hardware, ModelSpec, ServePlan
from optimizer.perf.weights import (
    active_matmul_params,
    expert_weight_bytes,
    matmul_params_16bit,
    prefill_per_width,
    rate_weighted_matmul_params,
    routed_matmul_params,
    streamed_weight_bytes,
)

MOST_AT_ONCE = 8192  # batches evaluated in one array; beyond it the bisection asks batch by batch


def serve_terms_at(m: ModelSpec, hw: Hardware, plan: ServePlan, batches: np.ndarray) -> ServeTerms:
    """``serve.serve_terms`` at each of ``batches`` (positive integers)."""
    one = serve_terms(m, hw, plan, 1)
    b = np.asarray(batches, dtype=np.int64)
    micro = np.minimum(plan.pp, b)
    mb = b / micro
    layers = math.ceil(m.layers / plan.pp)
    context = plan.input_len + plan.output_len / 2.0
    ar_bw = tp_allreduce_parts(mb * m.hidden * ACT_BYTES, hw, plan.tp)[0] + np.zeros(len(b))
    # vLLM's PagedAttention V1 rereads (a factor of 1 for every other kernel: not asked batch by batch)
    unshared = _distinct(mb, lambda x: unshared_kv_factor(m, plan, x)) if plan.paged_v1v2 else np.ones(len(b))
    # a dense model reads all its weights at any batch; an MoE model the experts its batch touches
    read = (_distinct(mb, lambda x: decode_weight_bytes(m, plan.precision, x)) if m.moe
            else np.full(len(b), decode_weight_bytes(m, plan.precision, 1.0)))
    prompts = b if plan.batching == "static" else np.minimum(b, PREFILL_BATCH)
    s = plan.input_len
    link = hw.group_link(plan.gpus, 2) if plan.pp > 1 else hw.link
    experts = (read - streamed_weight_bytes(m, plan.precision) + expert_weight_bytes(m, plan.precision)) / plan.gpus
    return replace(
        one, batch=b.astype(float), slots=np.maximum(micro, plan.pp).astype(float),
        weight_bytes=read / plan.gpus + replicated_attention_bytes(m, plan),
        expert_bytes=experts if m.moe else 0.0,
        kv_bytes=mb * decode_cache_bytes(m, plan, context, unshared), kv_read_factor=unshared,
        gemm_flops=mb * 2.0 * rate_weighted_matmul_params(hw.device, plan, active_matmul_params(m),
                                                          matmul_params_16bit(m, plan.precision)) / plan.gpus,
        expert_flops=mb * 2.0 * routed_matmul_params(m) / plan.gpus,
        attention_flops=mb * shape.mixing_flops_per_token(m, m.attended(context), decode=True) / plan.gpus,
        comm_bw=layers * collectives_per_layer(plan) * ar_bw,
        send=p2p_time(mb * m.hidden * ACT_BYTES, link) if plan.pp > 1 else 0.0,
        prefill_prompts=prompts.astype(float),
        prefill_gemm_per_width=_distinct(prompts, lambda p: prefill_per_width(m, plan, s, p)),
    )


def _distinct(values: np.ndarray, f: Callable[[Any], float]) -> np.ndarray:
    """``f`` (a scalar function) of each value, computed once per distinct value."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([f(v.item()) for v in distinct], dtype=float)[inverse.reshape(-1)]


def batch_at_slo(m: ModelSpec, hw: Hardware, plan: ServePlan, params: ServeParams,
                 tpot_limit: float | None = None, ttft_limit: float | None = None) -> int:
    """The largest batch whose TPOT and TTFT stay within their limits, as ``one_at_a_time`` finds
    it: the same bisection over the same batches, every batch's TPOT and TTFT evaluated in one pass
    of the model (a dense model, up to ``MOST_AT_ONCE`` batches; an MoE model's expert reads take a
    power per batch, so it is bisected one batch at a time)."""
    cap = max_batch(m, hw, plan)
    if cap < 1:
        return 0
    if cap > MOST_AT_ONCE or m.moe:  # an MoE model's weights read vary with every batch: bisect instead
        return one_at_a_time(m, hw, plan, params, tpot_limit, ttft_limit, cap)
    t = serve_time(serve_terms_at(m, hw, plan, np.arange(1, cap + 1)), params)
    ok = np.ones(cap, dtype=bool)
    if tpot_limit is not None:
        ok &= np.asarray(t.tpot) <= tpot_limit
    if ttft_limit is not None:
        ok &= np.asarray(t.ttft) <= ttft_limit
    return _largest(lambda batch: bool(ok[batch - 1]), cap)


def one_at_a_time(m: ModelSpec, hw: Hardware, plan: ServePlan, params: ServeParams,
                  tpot_limit: float | None = None, ttft_limit: float | None = None, cap: int | None = None) -> int:
    """Largest batch (up to ``cap``, by default what fits) whose TPOT and TTFT stay within their
    limits (None: no limit); 0 when even one sequence misses. Both grow with the batch, so bisection
    finds it, asking ``perf.serve`` batch by batch: the reference that ``batch_at_slo`` is tested
    against, and its path for MoE models and batches beyond ``MOST_AT_ONCE``."""

    def ok(batch: int) -> bool:  # serve()'s TPOT and TTFT, without its memory breakdown
        t = serve_time(serve_terms(m, hw, replace(plan, batch=batch), batch), params)
        return ((tpot_limit is None or float(t.tpot) <= tpot_limit)
                and (ttft_limit is None or float(t.ttft) <= ttft_limit))

    return _largest(ok, max_batch(m, hw, plan) if cap is None else cap)


def _largest(ok: Callable[[int], bool], cap: int) -> int:
    """The largest batch in 1..``cap`` that is ``ok``, by bisection (``ok`` holds up to some batch
    and fails beyond it: TPOT and TTFT grow with the batch); 0 when even one sequence is not."""
    if cap < 1 or not ok(1):
        return 0
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
