"""A checkpoint's weights by format: the bytes they take and a forward pass reads, and the rate
their GEMMs run at. Quantisers store only some weights in the weight format (the transformer blocks'
linear layers; gpt-oss only its routed experts) and keep the rest in 16-bit, which a 16-bit GEMM
multiplies. Pure functions of the frozen specs, like the rest of ``optimizer.perf``.
"""

from __future__ import annotations

import math

import numpy as np

from optimizer.perf import model as shape
from optimizer.perf.params import Num
from optimizer.perf.specs import BYTES, FORMATS, WEIGHT_MATH, Device, ModelSpec, ServePlan

# Weight formats whose checkpoints quantise only some weights. The quantisers leave the embedding
# table and the LM head in 16-bit (NVIDIA ModelOpt FP8 / NVFP4, llm-compressor FP8 and INT8, AutoAWQ
# and GPTQ: only the transformer blocks' linear layers are quantised), and gpt-oss ships only its
# routed experts in MXFP4 ("all other tensors in BF16", its model card; a dense model in MXFP4 is
# quantised as the other formats are). A GGUF type is a whole file's mix of block types (Q4_K_M keeps
# its output layer in Q6_K), so its bits per weight cover every tensor.
WHOLE_FILE = ("fp16", "bf16", "gguf-q4km")
EXPERTS_ONLY = ("mxfp4",)


def _experts_only(m: ModelSpec, precision: str) -> bool:
    return precision in EXPERTS_ONLY and m.moe


def _quantised_params(m: ModelSpec, precision: str) -> int:
    """Parameters stored in the weight format; the rest are 16-bit (``WHOLE_FILE``, ``EXPERTS_ONLY``)."""
    if precision in WHOLE_FILE:
        return shape.param_count(m)
    if _experts_only(m, precision):
        return shape.expert_params(m)
    return shape.transformer_params(m)


def matmul_params_16bit(m: ModelSpec, precision: str) -> float:
    """Of the weights a token multiplies by (``active_matmul_params``), those a quantised
    checkpoint keeps in 16-bit, whose GEMMs run at the 16-bit rate: the LM head, and for MXFP4
    everything but the routed experts (0 for a 16-bit or GGUF model)."""
    if precision in WHOLE_FILE:
        return 0.0
    if _experts_only(m, precision):
        return active_matmul_params(m) - routed_matmul_params(m)
    return float(m.vocab * m.hidden)


def weight_bytes(m: ModelSpec, precision: str) -> float:
    """Bytes of every weight the GPUs hold: the quantised ones in the format, the others in 16-bit."""
    quantised = _quantised_params(m, precision)
    return quantised * BYTES[precision] + (shape.param_count(m) - quantised) * 2.0


def _gathered_table(m: ModelSpec) -> int:
    """Parameters of an untied input embedding table, of which a pass gathers only its tokens' rows
    (0 when tied: the table is read whole, as the LM head)."""
    return 0 if m.tied_embeddings else m.vocab * m.hidden


def streamed_weight_bytes(m: ModelSpec, precision: str) -> float:
    """Bytes a forward pass reads: every weight but an untied input embedding table."""
    return weight_bytes(m, precision) - _gathered_table(m) * (BYTES[precision] if precision in WHOLE_FILE else 2.0)


def expert_weight_bytes(m: ModelSpec, precision: str) -> float:
    """Bytes of the routed experts (0 for a dense model): always in the weight format."""
    return shape.expert_params(m) * BYTES[precision]


def expert_slice_bytes(m: ModelSpec, plan: ServePlan) -> float:
    """Bytes of one routed expert of one layer on one GPU: its TP share (0 for a dense model)."""
    if not m.moe:
        return 0.0
    return expert_weight_bytes(m, plan.precision) / (m.moe_layers * m.experts * plan.tp)


def expert_ramp(expert_bytes: Num, expert_slice: Num, latency: Num) -> Num:
    """Seconds reading ``expert_bytes`` of routed experts costs beyond streaming them: ``latency``
    per expert slice of ``expert_slice`` bytes (0 for a dense model, whose slice is 0). A grouped
    MoE kernel (CUTLASS grouped GEMM, Triton's fused_moe) runs each expert as a GEMM of its own,
    whose weight stream starts cold and drains: the same microseconds for Mixtral's 88 MB slices
    on four GPUs as for DeepSeek-V3's 5.5 MB ones on eight, which stream in a sixteenth of the
    time. One efficiency on every expert byte could not hold both: LLM-Inference-Bench's
    TensorRT-LLM reads Mixtral 8x7B's weights and KV cache at about 98 % of an H100's bandwidth at
    batch 16 (7.5 ms a step for 24.7 GB a GPU), where the fine-grained models of other sources
    take about twice their bytes' streaming time. Serving plans split every expert by TP
    (``expert_slice_bytes``); under expert parallelism a GPU would read fewer, whole experts. The
    latency is fitted per GPU family and weight format (``catalogs/efficiency.yaml``): a ramp is the
    part's memory latency and clock, and the grouped kernel its format's."""
    if isinstance(expert_slice, float):  # the planner's one-plan calls: no numpy overhead
        return expert_bytes / expert_slice * latency if expert_slice > 0 else 0.0
    slices = expert_bytes / np.maximum(expert_slice, 1.0)
    return np.where(expert_slice > 0, slices * latency, 0.0)


def attention_bytes_per_param(m: ModelSpec, precision: str) -> float:
    """Bytes per attention weight: the format's, but 16-bit where only the experts are quantised."""
    return 2.0 if _experts_only(m, precision) else BYTES[precision]


def spec_gemm_peak(dev: Device, plan: ServePlan) -> float:
    """Dense FLOP/s of the weight GEMMs' math precision by the spec: its peak, or on a GPU that halves
    its 16-bit rate with FP32 accumulation (GeForce) the FP16-accumulate peak when the engine
    accumulates in FP16 (llama.cpp's cuBLAS GEMMs: CUBLAS_COMPUTE_16F)."""
    return _rate(dev, math_precision(dev, plan.precision), plan.fp16_accumulate, 1.0)


def gemm_peak(dev: Device, plan: ServePlan) -> float:
    """Dense FLOP/s the weight GEMMs can reach: ``spec_gemm_peak`` times the share of it a matmul
    sweep measured on the part (``Device.achievable_share``: 97 % of Gaudi 2's, 80 % of an H100's,
    51 % of an MI300X's BF16 peak), so that an engine's GEMM efficiency is a share of what the part
    can do and carries over between parts."""
    return _reachable(dev, math_precision(dev, plan.precision), plan.fp16_accumulate)


def _reachable(dev: Device, math: str, fp16_accumulate: bool) -> float:
    """What GEMMs in ``math`` reach on the part: its peak times its measured matmul share."""
    return _rate(dev, math, fp16_accumulate, dev.achievable_share(math))


def _rate(dev: Device, math: str, fp16_accumulate: bool, share: float) -> float:
    fast = dev.peak("fp16_acc16") if fp16_accumulate and math in ("fp16", "bf16") else None
    return (fast or dev.peak_of(math)) * share


def math_precision(dev: Device, precision: str) -> str:
    """The tensor-core precision a weight format's GEMMs run in on this GPU: the format's own
    (``FORMATS``) where the GPU has tensor cores for it and for its weights' type, else 16-bit
    (weight-only kernels dequantise into BF16 or FP16 math; an FP4 weight on an FP8-only Hopper is
    not multiplied in FP8)."""
    wanted = FORMATS[precision][1]
    native = dev.peak(wanted) and dev.peak(WEIGHT_MATH.get(precision, wanted))
    for candidate in ((wanted,) if native else ()) + ("bf16", "fp16"):
        if dev.peak(candidate):
            return candidate
    raise ValueError(f"{dev.name} has no tensor cores for {precision}")


def active_matmul_params(m: ModelSpec) -> float:
    """Weights a token multiplies by: every layer's active matmuls and the LM head (a decode token is
    a one-token prompt: ``model.prefill_matmul_params``)."""
    return shape.prefill_matmul_params(m, 1.0)


def rate_weighted_matmul_params(dev: Device, plan: ServePlan, params: float, params_16bit: float) -> float:
    """``params`` matmul weights of which ``params_16bit`` are 16-bit weights of a quantised checkpoint
    (``matmul_params_16bit``), counted at the rate of the plan's GEMMs (``gemm_peak``): each 16-bit
    one weighs that rate over the 16-bit GEMMs' (1.77 for FP8 on an H100, whose measured FP8 and BF16
    ceilings are 1,403 and 795 TFLOP/s; 3.93 for NVFP4 on a B200; 1 where the format's GEMMs run in
    16-bit anyway, as weight-only INT4 and GGUF do)."""
    if not params_16bit:
        return params
    slower = gemm_peak(dev, plan) / _reachable(dev, math_precision(dev, "fp16"), plan.fp16_accumulate) - 1.0
    return params + params_16bit * max(slower, 0.0)


def attention_gemm_flops(dev: Device, plan: ServePlan, m: ModelSpec, tokens: float) -> float:
    """FLOPs of ``tokens`` tokens through every layer's attention projections (QKV and O), at the
    rate of the plan's GEMMs as ``rate_weighted_matmul_params`` counts them (16-bit where only the
    experts are quantised, as gpt-oss's)."""
    params = tokens * shape.mixer_params_per_layer(m) * m.layers
    return 2.0 * rate_weighted_matmul_params(dev, plan, params, params if _experts_only(m, plan.precision) else 0.0)


def dequantised_params(m: ModelSpec, precision: str) -> float:
    """Weights a prefill pass dequantises into 16-bit copies (``serve_memory.dequant_bytes``): the
    quantised ones it streams (an untied input table's rows are gathered, not multiplied)."""
    return float(_quantised_params(m, precision) - (_gathered_table(m) if precision in WHOLE_FILE else 0))


def routed_matmul_params(m: ModelSpec) -> float:
    """Weights a token multiplies by in the routed experts it is sent to (0 for a dense model)."""
    if not m.moe:
        return 0.0
    return m.moe_layers * m.experts_active * m.mlp_matrices * m.hidden * m.expert_ffn_hidden


def prefill_chunks(plan: ServePlan) -> int:
    """Micro-batches a prompt is prefilled in (llama.cpp's ``n_ubatch``; 1 for other engines)."""
    return math.ceil(plan.input_len / plan.prefill_ubatch) if plan.prefill_ubatch else 1


def prefill_per_width(m: ModelSpec, plan: ServePlan, tokens: float, prompts: float) -> float:
    """Σ FLOPs / narrowest side of a prompt's GEMMs on one GPU when ``prompts`` prompts of ``tokens``
    tokens go through together, in chunks; the LM head takes one row a prompt (``model.prefill_matmul_params``)."""
    rows = prompts * tokens / prefill_chunks(plan)
    layers = sum(2.0 * flops / width for flops, width in shape.gemm_shapes(m, plan.tp, 1, rows)) * m.layers
    head = 2.0 * m.vocab * m.hidden / plan.tp / max(1.0, min(m.hidden, m.vocab / plan.tp, prompts))
    return (tokens * layers / 2.0 + head) / plan.pp
