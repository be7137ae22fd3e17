"""Serving memory: the bytes a replica's weights and KV cache take on each GPU, and the largest
batch that fits beside them (Kwon et al. 2023, PagedAttention: the KV cache is what bounds the
batch). Pure functions of the frozen specs, like the rest of ``optimizer.perf``.
"""

from __future__ import annotations

import math

from optimizer.perf import model as shape
from optimizer.perf.params import Num
from optimizer.perf.specs import ACT_BYTES, BYTES, FORMATS, Hardware, ModelSpec, ServePlan
from optimizer.perf.weights import (
    attention_bytes_per_param,
    dequantised_params,
    expert_weight_bytes,
    streamed_weight_bytes,
    weight_bytes,
)


def kv_bytes_per_token(m: ModelSpec, kv_precision: str = "fp16") -> float:
    """``2 · L · kv_heads · head_dim · bytes``: K and V of every layer (GQA keeps few KV heads).
    Multi-head latent attention caches one compressed vector (kv_lora_rank + rotary key) per layer."""
    if m.mla:
        return m.layers * (m.kv_lora_rank + m.qk_rope_dim) * BYTES[kv_precision]
    return 2.0 * (m.layers - m.linear_layers) * m.kv_heads * m.head_dim * BYTES[kv_precision]


def state_bytes_per_gpu(m: ModelSpec, plan: ServePlan) -> float:
    """The recurrent state one sequence keeps in the linear-attention layers (``model.linear_state_values``)
    on one GPU, averaged over the replica's: TP splits the heads, PP the layers, attention data
    parallelism keeps a sequence's on one GPU of the group. vLLM holds it at the model's 16-bit dtype
    unless told otherwise (``MambaStateDtypeCalculator.gated_delta_net_state_dtype``: the cache
    dtype, 'auto' resolving to the model's); 0 for a model without linear layers."""
    if not m.linear_layers:
        return 0.0
    layers = math.ceil(m.layers / plan.pp) * m.linear_layers / m.layers
    return layers * shape.linear_state_values(m) * ACT_BYTES / plan.tp


def decode_cache_bytes(m: ModelSpec, plan: ServePlan, context: float, unshared: Num) -> Num:
    """Bytes one decode step moves for one sequence's cache on one GPU: its KV cache read
    ``unshared`` times (``unshared_kv_factor``), and a linear layer's recurrent state read and
    written back (Gated DeltaNet updates it in place every token)."""
    return _kv_cache_bytes(m, plan, context) * unshared + 2.0 * state_bytes_per_gpu(m, plan)


# vLLM's switch between its PagedAttention kernels (vllm/attention/ops/paged_attn.py, v0.2-0.6; TGI's
# 2024 ROCm attention layer, server/text_generation_server/layers/attention/rocm.py, copies it): V1 runs
# one thread block per sequence and query head over the whole context; V2 splits the context into
# 512-token partitions
PAGED_PARTITION = 512
PAGED_V1_WORK = 512  # V1 once sequences x query heads exceed this (V2 below it)
PAGED_V1_MAX_LEN = 8192  # V2 above this context whatever the work (V1's shared memory)


def unshared_kv_factor(m: ModelSpec, plan: ServePlan, sequences: float) -> float:
    """How many times over a decode step reads the KV cache under vLLM's generic PagedAttention
    kernels (``plan.paged_v1v2``): 1 for other kernels and for multi-head attention.

    vLLM picks V1 when a context fits one 512-token partition, or when sequences × query heads
    exceed 512 and the context is at most 8,192 tokens (``use_v1`` in its paged_attn.py). V1 gives
    each query head its own thread block streaming the whole context, so the query heads of a GQA
    group read their shared K and V separately: the read grows by query heads / KV heads for the
    steps whose context spans several partitions. LLM-Inference-Bench's vLLM 0.6.1 runs on MI300X
    (calibration/serving_runs_5.md) step down exactly where the switch flips (Llama 3 8B at 2048/2048:
    batch 16 → 32 on one GPU, 32 → 64 on two, ...): Llama 3 8B and 70B (four and eight query heads
    per KV head) lose a quarter to a third of their throughput there, the multi-head Llama 2 7B a
    tenth, though its KV read is the larger share of its step; a kernel merely slower per byte would
    hit it hardest."""
    q_heads = m.heads / plan.tp
    ratio = q_heads / max(1.0, m.kv_heads / plan.tp)
    if not plan.paged_v1v2 or m.mla or ratio <= 1.0 or sequences * q_heads <= PAGED_V1_WORK:
        return 1.0
    first, last = float(plan.input_len), float(plan.input_len + plan.output_len)
    lo, hi = max(first, PAGED_PARTITION), min(last, PAGED_V1_MAX_LEN)
    if hi <= lo:
        return 1.0
    # the KV read over the steps whose context lies in (512, 8192], as a share of all steps' reads
    share = (hi * hi - lo * lo) / (last * last - first * first)
    return 1.0 + (ratio - 1.0) * share


def kv_bytes_per_gpu(m: ModelSpec, plan: ServePlan, context: float) -> float:
    """KV cache of one sequence at ``context`` tokens on one GPU, averaged over the replica's GPUs.
    TP splits the KV heads (a head is replicated when TP exceeds kv_heads; MLA's latent vector is
    replicated on every TP rank); PP splits layers; windowed layers keep at most their window (vLLM's
    hybrid allocator), linear-attention layers a fixed state (``state_bytes_per_gpu``). With attention
    data parallelism a sequence's whole cache lives on one GPU of the group, so each holds 1/tp of the
    sequences and nothing is replicated (the point of DP attention for MLA: SGLang's DeepSeek blog,
    2024; TensorRT-LLM's DeepSeek-R1 throughput guide)."""
    return _kv_cache_bytes(m, plan, context) + state_bytes_per_gpu(m, plan)


def _kv_cache_bytes(m: ModelSpec, plan: ServePlan, context: float) -> float:
    """``kv_bytes_per_gpu`` without the linear layers' state: the attention layers' K and V."""
    layers = math.ceil(m.layers / plan.pp)
    kv_heads = m.kv_heads if plan.attention_dp else math.ceil(m.kv_heads / plan.tp)
    if m.mla:
        per_layer = (m.kv_lora_rank + m.qk_rope_dim) * BYTES[plan.kv_precision]
    else:
        per_layer = 2.0 * kv_heads * m.head_dim * BYTES[plan.kv_precision]
    share = 1.0 / plan.tp if plan.attention_dp else 1.0
    return layers * per_layer * m.attended(context) * share


def replicated_attention_bytes(m: ModelSpec, plan: ServePlan) -> float:
    """Bytes per GPU beyond an even split that attention data parallelism costs: every GPU of the
    TP group keeps its stages' attention weights whole instead of 1/tp of them (0 without it)."""
    if not plan.attention_dp or plan.tp == 1:
        return 0.0
    layers = math.ceil(m.layers / plan.pp)
    whole = shape.mixer_params_per_layer(m) * layers * attention_bytes_per_param(m, plan.precision)
    return whole * (1.0 - 1.0 / plan.tp)


def decode_weight_bytes(m: ModelSpec, precision: str, batch: float) -> float:
    """Weights one decode step reads (``streamed_weight_bytes``: all but an untied input embedding
    table): all of a dense model's; of an MoE model's, the dense part plus the experts the batch
    touches, E·(1 − (1 − k/E)^b) per MoE layer for b tokens routed at random."""
    total = streamed_weight_bytes(m, precision)
    if not m.moe:
        return total
    experts = expert_weight_bytes(m, precision)
    touched = 1.0 - (1.0 - m.experts_active / m.experts) ** max(batch, 0.0)
    return float(total - experts + experts * touched)


def dequant_bytes(m: ModelSpec, plan: ServePlan) -> float:
    """Bytes one prefill pass moves to dequantise a weight-only format into 16-bit copies for
    cuBLAS: the packed weights read, their 16-bit copies written (llama.cpp until June 2024 on GPUs
    with tensor cores: PR #3412 'perform cublas mat mul of quantized types as f16', replaced by
    int8 MMQ kernels in PR #8075). Engines whose kernels dequantise in registers (Marlin, MMQ,
    TensorRT-LLM's weight-only GEMMs) move nothing extra: 0."""
    nbytes, math_format = FORMATS[plan.precision]
    if not plan.prefill_dequant or math_format != "fp16" or nbytes >= 2.0:
        return 0.0
    return dequantised_params(m, plan.precision) * (nbytes + 2.0)


def held_context(plan: ServePlan) -> float:
    """Tokens of KV cache a sequence in flight holds: its whole length where the engine reserves it
    at admission; where blocks are taken as tokens are generated (PagedAttention, Kwon et al. 2023,
    section 4.5), the mean over a sequence's life, ``input + output / 2``, since a full batch holds
    sequences of every age."""
    return plan.input_len + plan.output_len / (2.0 if plan.kv_on_demand else 1.0)


# Tokens one forward pass may carry, which the engine sizes its activation workspace for at start-up,
# whatever the prompts: TensorRT-LLM's max_num_tokens (8,192 by default), vLLM's max_num_batched_tokens
# and SGLang's chunked_prefill_size (8,192 on large GPUs). An engine that splits a prompt into
# micro-batches (llama.cpp's n_ubatch) sizes it for one micro-batch; a plan's ``token_budget``
# replaces it where a run states another (vLLM V0 without chunked prefill: the context window).
TOKEN_BUDGET = 8192


def serve_memory(m: ModelSpec, plan: ServePlan, batch: int) -> dict[str, float]:
    """Bytes per GPU: weights, the KV cache ``batch`` sequences hold (``held_context``), for a
    hybrid model the recurrent state they keep in its linear-attention layers (``recurrent_state``,
    only for such a model), one layer's activations for the engine's token budget (the plan's
    ``token_budget``, else ``TOKEN_BUDGET``, or its prompt micro-batch), and the reserved runtime
    memory."""
    weights = weight_bytes(m, plan.precision) / plan.gpus + replicated_attention_bytes(m, plan)
    memory = {"weights": weights, "kv_cache": batch * _kv_cache_bytes(m, plan, held_context(plan))}
    if m.linear_layers:
        memory["recurrent_state"] = batch * state_bytes_per_gpu(m, plan)
    tokens = plan.prefill_ubatch or plan.token_budget or TOKEN_BUDGET
    memory["activations"] = tokens * (4.0 * m.hidden + 2.0 * m.ffn_hidden / plan.tp) * ACT_BYTES
    memory["reserved"] = plan.reserved_memory
    return memory


def max_batch(m: ModelSpec, hw: Hardware, plan: ServePlan) -> int:
    """Largest number of sequences whose KV cache (``held_context``) fits beside the weights,
    capped by the engine's limit on sequences in flight."""
    fit = _fitting(m, hw, plan, held_context(plan))
    cap = plan.max_seqs * (plan.tp if plan.attention_dp else 1)  # each attention-DP rank schedules its own
    return min(fit, cap) if cap else fit


def full_length_batch(m: ModelSpec, hw: Hardware, plan: ServePlan) -> int:
    """Sequences whose KV cache fits at their full length (prompt and every output token): what a
    static batch can decode to its end at once. A larger static batch runs in waves: vLLM's V0
    scheduler admits prompts while blocks are free and preempts the newest sequences when decode
    runs out (Kwon et al. 2023, section 4.5), so at most this many finish together."""
    return _fitting(m, hw, plan, float(plan.input_len + plan.output_len))


def _fitting(m: ModelSpec, hw: Hardware, plan: ServePlan, context: float) -> int:
    """Sequences of ``context`` tokens whose KV cache fits beside the weights and workspace."""
    fixed = serve_memory(m, plan, 0)
    free = (hw.device.memory * plan.memory_fraction - sum(fixed.values())) * plan.kv_fraction
    return max(0, int(free // kv_bytes_per_gpu(m, plan, context)))
