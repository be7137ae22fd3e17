"""Serving: memory, time to first token, time per output token and throughput of one replica.

A replica is ``tp × pp`` GPUs holding one copy of the weights. Decode is a roofline (Williams
et al. 2009): each step reads the weights and every sequence's KV cache from memory and does
``2·N`` FLOPs per token plus attention, so it is memory-bound below a batch of about
``FLOP/s ÷ bytes/s`` and compute-bound above it (seed 003_822282aa4321783a). Tensor parallelism
adds two all-reduces of ``b·h`` values per layer per step (Megatron's row/column split); the
fixed latency of those transfers is what separates NVLink from PCIe without peer-to-peer.
Pipeline parallelism splits layers into stages that a token crosses one after another.
Continuous batching (Yu et al. 2022, Orca) keeps ``b`` sequences in flight; each finished
sequence is replaced by a new one whose prompt is prefilled, compute-bound, between decode steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from optimizer.perf import model as shape
from optimizer.perf.specs import Efficiency, Hardware, ModelSpec
from optimizer.perf.train import allreduce_time, p2p_time

BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
SERVE_PRECISIONS = ("fp16", "bf16", "fp8", "int8", "int4")
ACT_BYTES = 2.0


@dataclass(frozen=True)
class ServePlan:
    """One replica type: its split, number formats, request shape and batch."""

    tp: int = 1
    pp: int = 1
    precision: str = "fp16"  # weights; int8/int4 are weight-only (fp16 math)
    kv_precision: str = "fp16"
    input_len: int = 512
    output_len: int = 256
    batch: int | None = None  # sequences in flight per replica; None: the largest that fits

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class ServeResult:
    fits: bool
    max_batch: int
    batch: int
    memory_per_gpu: float  # bytes at ``batch``
    memory_capacity: float
    memory_breakdown: tuple[tuple[str, float], ...]
    ttft: float  # s, prefill of one prompt, plus the decode step in progress when the replica is busy
    tpot: float  # s, mean time between output tokens of one sequence at ``batch``
    decode_step: float  # s, one decode step of the whole batch
    output_tokens_per_s: float  # whole replica
    total_tokens_per_s: float  # prompt + output tokens
    requests_per_s: float
    decode_breakdown: tuple[tuple[str, float], ...]


def weight_bytes(m: ModelSpec, precision: str) -> float:
    return shape.param_count(m) * BYTES[precision]


def kv_bytes_per_token(m: ModelSpec, kv_precision: str = "fp16") -> float:
    """``2 · L · kv_heads · head_dim · bytes``: K and V of every layer (GQA keeps few KV heads).
    Multi-head latent attention caches one compressed vector (kv_lora_rank + rotary key) per layer."""
    if m.mla:
        return m.layers * (m.kv_lora_rank + m.qk_rope_dim) * BYTES[kv_precision]
    return 2.0 * m.layers * m.kv_heads * m.head_dim * BYTES[kv_precision]


def kv_bytes_per_token_per_gpu(m: ModelSpec, plan: ServePlan) -> float:
    """TP splits the KV heads (a head is replicated when TP exceeds kv_heads; MLA's latent vector
    is replicated on every TP rank); PP splits layers."""
    layers = math.ceil(m.layers / plan.pp)
    if m.mla:
        return layers * (m.kv_lora_rank + m.qk_rope_dim) * BYTES[plan.kv_precision]
    heads = math.ceil(m.kv_heads / plan.tp)
    return 2.0 * layers * heads * m.head_dim * BYTES[plan.kv_precision]


def decode_weight_bytes(m: ModelSpec, precision: str, batch: float) -> float:
    """Weights one decode step reads: all of a dense model; of an MoE model, the dense part plus
    the experts the batch touches, E·(1 − (1 − k/E)^b) per MoE layer for b tokens routed at random."""
    total = weight_bytes(m, precision)
    if not m.moe:
        return total
    experts = shape.expert_params(m) * BYTES[precision]
    touched = 1.0 - (1.0 - m.experts_active / m.experts) ** max(batch, 0.0)
    return total - experts + experts * touched


def _compute_rate(hw: Hardware, precision: str) -> float:
    """Achievable FLOP/s: fp8 runs on fp8 tensor cores; int8/int4 weight-only runs fp16 math."""
    math_precision = "fp8" if precision == "fp8" else ("bf16" if precision == "bf16" else "fp16")
    dev = hw.device
    peak = dev.peak(math_precision) or (dev.peak("fp16") if math_precision == "bf16" else dev.peak("bf16"))
    if not peak:
        raise ValueError(f"{dev.name} has no {math_precision} tensor cores")
    return peak * dev.efficiency(math_precision)


def serve_memory(m: ModelSpec, plan: ServePlan, batch: int, eff: Efficiency) -> dict[str, float]:
    """Bytes per GPU: weights, the KV cache of ``batch`` full-length sequences, one layer's
    prefill activations, and the reserved runtime memory."""
    context = plan.input_len + plan.output_len
    weights = weight_bytes(m, plan.precision) / plan.gpus
    kv = batch * context * kv_bytes_per_token_per_gpu(m, plan)
    acts = plan.input_len * (4.0 * m.hidden + 2.0 * m.ffn_hidden / plan.tp) * ACT_BYTES
    return {"weights": weights, "kv_cache": kv, "activations": acts, "reserved": eff.reserved_memory}


def max_batch(m: ModelSpec, hw: Hardware, plan: ServePlan, eff: Efficiency) -> int:
    """Largest number of full-length sequences whose KV cache fits beside the weights."""
    fixed = serve_memory(m, plan, 0, eff)
    free = (hw.device.memory - sum(fixed.values())) * eff.kv_memory_fraction
    per_seq = (plan.input_len + plan.output_len) * kv_bytes_per_token_per_gpu(m, plan)
    return max(0, int(free // per_seq))


def _tp_allreduce(nbytes: float, hw: Hardware, plan: ServePlan) -> float:
    return allreduce_time(nbytes, plan.tp, hw.group_link(plan.tp)) if plan.tp > 1 else 0.0


def decode_step(m: ModelSpec, hw: Hardware, plan: ServePlan, batch: int,
                eff: Efficiency) -> tuple[float, dict[str, float]]:
    """Time for every one of ``batch`` sequences to produce one token, and its parts.

    Per stage and micro-batch: the GEMMs over the weights on their roofline, then attention over
    the KV cache on its own, + TP all-reduces (exposed part) + the send to the next stage. With
    PP the batch splits into min(pp, batch) micro-batches that chase each other through the
    stages, so a step takes max(micro-batches, pp) stage slots.
    """
    layers = math.ceil(m.layers / plan.pp)
    context = plan.input_len + plan.output_len / 2.0  # mean context over a sequence's life
    micro = min(plan.pp, batch)
    mb = batch / micro
    bw = hw.device.mem_bw * eff.mem_bw
    rate = _compute_rate(hw, plan.precision)
    weights_gpu = decode_weight_bytes(m, plan.precision, mb) / plan.gpus
    kv_read = mb * context * kv_bytes_per_token_per_gpu(m, plan)
    # the projections/MLP (a GEMM over the weights) and attention (over each sequence's KV
    # cache) are separate kernels, each on its own roofline, run one after the other
    gemm_flops = mb * (2.0 * shape.matmul_params_per_layer(m) * m.layers + 2.0 * m.vocab * m.hidden) / plan.gpus
    attn_flops = mb * 4.0 * context * m.hidden * m.layers / plan.gpus
    gemm = max(weights_gpu / bw, gemm_flops / (rate * eff.decode_gemm))
    attention = max(kv_read / (hw.device.mem_bw * eff.attention_bw), attn_flops / rate)
    compute = gemm_flops / rate + attn_flops / rate
    work = gemm + attention
    comm = layers * 2 * _tp_allreduce(mb * m.hidden * ACT_BYTES, hw, plan)
    exposed = comm - min(eff.tp_overlap * comm, work)
    send = p2p_time(mb * m.hidden * ACT_BYTES, hw.group_link(plan.gpus)) if plan.pp > 1 else 0.0
    stage = work + exposed + send
    slots = max(micro, plan.pp)
    parts = {"weights_read": slots * weights_gpu / bw,
             "kv_read": slots * kv_read / (hw.device.mem_bw * eff.attention_bw),
             "compute": slots * compute, "gemm": slots * gemm, "attention": slots * attention,
             "tp_comm": slots * exposed, "pp_send": slots * send}
    return slots * stage, parts


def prefill_time(m: ModelSpec, hw: Hardware, plan: ServePlan, prompts: int, eff: Efficiency) -> float:
    """Prefill ``prompts`` prompts of ``input_len`` tokens: GEMMs at the GPU's matmul efficiency
    and attention's causal ``2·s²·h`` per layer at the attention-kernel efficiency (as in
    training), unless the weights take longer to read; TP all-reduces of ``s·h`` values twice
    per layer; the stages run one after another for one prompt."""
    s = plan.input_len
    rate = _compute_rate(hw, plan.precision)
    gemm = prompts * (2.0 * shape.matmul_params_per_layer(m) * m.layers * s + 2.0 * m.vocab * m.hidden)
    attention = prompts * 2.0 * s * s * m.hidden * m.layers
    # no element-wise term: inference engines fuse norms, activations and residual adds into
    # their GEMM and attention kernels (TensorRT-LLM plugins); with training's unfused traffic
    # the serving rows' p90 error rose from 24 % to 32 % (gpuopt fit)
    compute = (gemm / rate + attention / (rate * eff.attention_kernel)) / plan.gpus
    memory = weight_bytes(m, plan.precision) / plan.gpus / (hw.device.mem_bw * eff.mem_bw)
    layers = math.ceil(m.layers / plan.pp)
    comm = layers * 2 * _tp_allreduce(prompts * s * m.hidden * ACT_BYTES, hw, plan)
    send = p2p_time(prompts * s * m.hidden * ACT_BYTES, hw.group_link(plan.gpus)) if plan.pp > 1 else 0.0
    return plan.pp * (max(compute, memory) + comm + send) if plan.pp > 1 else max(compute, memory) + comm


def serve(m: ModelSpec, hw: Hardware, plan: ServePlan, eff: Efficiency) -> ServeResult:
    """Predict one replica. Without ``plan.batch``: the saturated case, the largest batch that fits."""
    if plan.precision not in BYTES or plan.kv_precision not in BYTES:
        raise ValueError(f"unknown precision {plan.precision!r} or {plan.kv_precision!r}")
    cap = max_batch(m, hw, plan, eff)
    batch = plan.batch if plan.batch is not None else max(cap, 1)
    memory = serve_memory(m, plan, batch, eff)
    step, parts = decode_step(m, hw, plan, batch, eff)
    per_prompt = prefill_time(m, hw, plan, max(1, min(batch, 8)), eff) / max(1, min(batch, 8))
    # every output_len decode steps each of the batch's sequences is replaced and prefilled
    tpot = step + batch * per_prompt / plan.output_len
    out_rate = batch / tpot
    result = ServeResult(
        fits=sum(memory.values()) <= hw.device.memory and cap >= 1,
        max_batch=cap,
        batch=batch,
        memory_per_gpu=sum(memory.values()),
        memory_capacity=hw.device.memory,
        memory_breakdown=tuple(memory.items()),
        ttft=prefill_time(m, hw, plan, 1, eff) + (step if batch > 1 else 0.0),
        tpot=tpot,
        decode_step=step,
        output_tokens_per_s=out_rate,
        total_tokens_per_s=out_rate * (plan.input_len + plan.output_len) / plan.output_len,
        requests_per_s=out_rate / plan.output_len,
        decode_breakdown=tuple(parts.items()),
    )
    return result


def batch_at_slo(m: ModelSpec, hw: Hardware, plan: ServePlan, eff: Efficiency, tpot_limit: float | None = None,
                 ttft_limit: float | None = None) -> int:
    """Largest batch (up to what fits) whose TPOT and TTFT stay within their limits (None: no
    limit); 0 when even one sequence misses. Both grow with the batch, so bisection finds it."""

    def ok(batch: int) -> bool:
        r = serve(m, hw, replace(plan, batch=batch), eff)
        return (tpot_limit is None or r.tpot <= tpot_limit) and (ttft_limit is None or r.ttft <= ttft_limit)

    cap = max_batch(m, hw, plan, eff)
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
