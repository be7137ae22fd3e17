"""Serving: memory, time to first token, time per output token and throughput of one replica.

A replica is ``tp × pp`` GPUs holding one copy of the weights. As for training, ``serve_terms``
counts the work at unit efficiency and ``serve_time`` turns it into seconds with an engine's
efficiency parameters (``ServeParams``), in arithmetic that also runs over arrays of rows.

Decode is a roofline per kernel (Williams et al. 2009): each step reads the weights (for an MoE
model, the experts the batch touches) and every sequence's KV cache, and does ``2·N`` FLOPs per
token plus attention, so it is memory-bound below a batch of about ``FLOP/s ÷ bytes/s`` and
compute-bound above it (seed 003_822282aa4321783a), its GEMMs at prefill's efficiency; near the
ridge a kernel is held back by both (``perf.roofline``). Tensor parallelism adds two all-reduces of
``b·h`` values per layer per step (Megatron's row/column split): at small batch their fixed
latency, not their bytes, is what keeps a small model from scaling with TP. An engine also spends
time outside the kernels on every step (launches, scheduling, sampling: milliseconds for some
releases) and per sequence, more behind an API server, which runs its own loop every step and
detokenises and streams every sequence's token, than in an offline batch handed to the engine
directly ("vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction", 2024-09-05: vLLM
0.5.3's server took 33 % of the time, Llama 3 8B on an H100).
Pipeline parallelism splits layers into stages that a token crosses one after another. Continuous
batching (Yu et al. 2022, Orca) keeps ``b`` sequences in flight and prefills each newcomer between
decode steps; a static batch (``batching='static'``) prefills all ``b`` prompts, then decodes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.perf import model as shape
from optimizer.perf.burst import burst_prefill_share, burst_ttft, longest_share
from optimizer.perf.comm import collectives_per_layer, p2p_time, tp_allreduce_parts
from optimizer.perf.params import Num, ServeParams
from optimizer.perf.roofline import roofline
from optimizer.perf.serve_memory import (
    TOKEN_BUDGET,
    decode_cache_bytes,
    decode_weight_bytes,
    dequant_bytes,
    kv_bytes_per_token,
    max_batch,
    replicated_attention_bytes,
    serve_memory,
    unshared_kv_factor,
)
from optimizer.perf.specs import (
    ACT_BYTES,
    BYTES,
    FORMATS,
    KV_PRECISIONS,
    SERVE_PRECISIONS,
    Hardware,
    ModelSpec,
    ServePlan,
    ServeResult,
)
from optimizer.perf.weights import (
    active_matmul_params,
    attention_gemm_flops,
    expert_ramp,
    expert_slice_bytes,
    expert_weight_bytes,
    gemm_peak,
    math_precision,
    matmul_params_16bit,
    prefill_chunks,
    prefill_per_width,
    rate_weighted_matmul_params,
    routed_matmul_params,
    streamed_weight_bytes,
    weight_bytes,
)

__all__ = ["ACT_BYTES", "BYTES", "FORMATS", "KV_PRECISIONS", "SERVE_PRECISIONS", "ServePlan", "ServeResult",
           "ServeTerms", "decode_weight_bytes", "gemm_peak", "kv_bytes_per_token", "math_precision",
           "max_batch", "serve", "serve_memory", "serve_terms", "serve_time", "weight_bytes", "DECODE_SUMMANDS",
           "EXPOSED_HOST", "HOST_WORK"]

PREFILL_BATCH = 8  # prompts an engine prefills together under load (chunked prefill mixes them in)


@dataclass(frozen=True)
class ServeTerms:
    """A replica's work at a batch, at unit efficiency (any field may be an array)."""

    batch: Num
    input_len: Num
    output_len: Num
    static: Num  # 1.0 for a static batch, 0.0 for continuous batching
    requests: Num  # requests of a burst that arrive together (0: a steady stream)
    variable: Num  # 1.0 when request lengths vary (the lengths are means), else 0.0
    output_cap: Num  # where lengths vary, the longest a request may generate over the mean (inf: no limit)
    online: Num  # 1.0 when requests come through the engine's API server, 0.0 for an offline batch
    slots: Num  # stage slots per decode step: max(micro-batches, pp)
    layers: Num  # layers on one stage (kernel launches scale with them)
    weight_bytes: Num  # per GPU per micro-batch step (MoE: the experts touched)
    expert_bytes: Num  # of which the routed experts' (0 for a dense model)
    expert_slice: Num  # bytes of one routed expert's weights in one layer on one GPU (its TP share; 0: dense)
    kv_bytes: Num  # per GPU per micro-batch step
    overlap: Num  # 1: the host's work per step overlaps the GPU's (an overlap scheduler); 0: it adds to it
    mixed: Num  # 1: new prompts are prefilled inside the decode step's forward pass; 0: in passes of their own
    kv_read_factor: Num  # times the step reads the KV cache (``unshared_kv_factor``; 1 but for vLLM's V1 kernel)
    gemm_flops: Num  # per GPU per micro-batch step, at ``peak``'s rate (a 16-bit weight's counted over: weights.py)
    expert_flops: Num  # of which the routed experts' GEMMs
    attention_flops: Num  # per GPU per micro-batch step
    comm_bw: Num  # s per micro-batch step: TP all-reduce bytes
    comm_latency: Num  # s per micro-batch step: TP all-reduce fixed latency
    send: Num  # s per micro-batch step: to the next pipeline stage
    prefill_prompts: Num  # prompts prefilled together (the whole batch when static)
    prefill_chunks: Num  # micro-batches one prefill pass is split into, pipelined over the stages
    prefill_gemm_flops: Num  # per GPU per prompt, at ``peak``'s rate as ``gemm_flops``
    prefill_expert_flops: Num  # of which the routed experts' GEMMs
    prefill_gemm_per_width: Num  # per GPU per prompt: Σ FLOPs / narrowest side, prompts prefilled together
    prefill_one_gemm_per_width: Num  # the same for a prompt prefilled alone
    prefill_attention_flops: Num  # per GPU per prompt
    # attention data parallelism (SGLang's --enable-dp-attention, TensorRT-LLM's enable_attention_dp):
    # each prompt's attention runs on one GPU of the TP group, so the busiest of its ``attention_ranks``
    # (tp; 1 without it) runs ceil(prompts / tp) prompts' attention projections and attention
    attention_ranks: Num
    prefill_attention_gemm_flops: Num  # of prefill_gemm_flops, the attention projections' (per GPU per prompt)
    prefill_weight_bytes: Num  # per GPU per prefill pass
    prefill_dequant_bytes: Num  # per GPU per prefill pass: a weight-only format dequantised into 16-bit copies
    prefill_comm_bw: Num  # s per prompt
    prefill_comm_latency: Num  # s per prefill pass
    prefill_send: Num  # s per prompt
    prefill_budget: Num  # tokens a step may prefill (the engine's token budget)
    stages: Num  # pp
    peak: Num  # FLOP/s the GEMMs can reach at their math precision (``weights.gemm_peak``: spec x measured share)
    peak_16bit: Num
    mem_bw: Num


@dataclass(frozen=True)
class ServeTimes:
    decode_step: Num
    prefill_one: Num
    tpot: Num
    ttft: Num
    output_tokens_per_s: Num
    parts: dict[str, Num]


def serve_terms(m: ModelSpec, hw: Hardware, plan: ServePlan, batch: int) -> ServeTerms:
    """The work of one replica at ``batch`` sequences in flight."""
    if plan.precision not in FORMATS or plan.kv_precision not in KV_PRECISIONS:
        raise ValueError(f"unknown precision {plan.precision!r} or KV-cache precision {plan.kv_precision!r}")
    dev = hw.device
    layers = math.ceil(m.layers / plan.pp)
    context = plan.input_len + plan.output_len / 2.0  # mean context over a sequence's life
    micro = min(plan.pp, batch)
    mb = batch / micro
    ar_bw, ar_lat = tp_allreduce_parts(mb * m.hidden * ACT_BYTES, hw, plan.tp)
    attended = m.attended(context)
    prompts = batch if plan.batching == "static" else min(batch, PREFILL_BATCH)
    s = plan.input_len
    chunks = prefill_chunks(plan)
    p_bw, p_lat = tp_allreduce_parts(s * m.hidden * ACT_BYTES, hw, plan.tp)
    collectives = collectives_per_layer(plan)
    read = decode_weight_bytes(m, plan.precision, mb)  # the weights (and experts) one step touches
    replicated = replicated_attention_bytes(m, plan)
    unshared = unshared_kv_factor(m, plan, mb)
    link = hw.group_link(plan.gpus, 2) if plan.pp > 1 else hw.link  # a pipeline stage sends to the next
    p16 = matmul_params_16bit(m, plan.precision)  # per token; the LM head once a prompt
    head = m.vocab * m.hidden if p16 else 0.0
    prefill_gemm = 2.0 * rate_weighted_matmul_params(dev, plan, shape.prefill_matmul_params(m, s),
                                                     p16 + (s - 1.0) * (p16 - head)) / plan.gpus
    # causal attention over the prompt: a token attends to s/2 others on average (2·s²·h per layer)
    prefill_attention = s * shape.mixing_flops_per_token(m, m.attended(s / 2.0)) / plan.gpus
    return ServeTerms(
        batch=float(batch), input_len=float(plan.input_len), output_len=float(plan.output_len),
        static=1.0 if plan.batching == "static" else 0.0, requests=float(plan.requests),
        variable=1.0 if plan.variable_lengths else 0.0, online=1.0 if plan.online else 0.0,
        output_cap=plan.max_output_len / plan.output_len if plan.max_output_len else math.inf,
        slots=float(max(micro, plan.pp)), layers=float(layers),
        weight_bytes=read / plan.gpus + replicated,
        expert_bytes=(read - streamed_weight_bytes(m, plan.precision)
                      + expert_weight_bytes(m, plan.precision)) / plan.gpus if m.moe else 0.0,
        expert_slice=expert_slice_bytes(m, plan),
        kv_bytes=mb * decode_cache_bytes(m, plan, context, unshared), kv_read_factor=unshared,
        overlap=1.0 if plan.overlap_scheduler else 0.0, mixed=1.0 if plan.mixed_batching else 0.0,
        gemm_flops=mb * 2.0 * rate_weighted_matmul_params(dev, plan, active_matmul_params(m), p16) / plan.gpus,
        expert_flops=mb * 2.0 * routed_matmul_params(m) / plan.gpus,
        attention_flops=mb * shape.mixing_flops_per_token(m, attended, decode=True) / plan.gpus,
        comm_bw=layers * collectives * ar_bw, comm_latency=layers * collectives * ar_lat,
        send=p2p_time(mb * m.hidden * ACT_BYTES, link) if plan.pp > 1 else 0.0,
        prefill_prompts=float(prompts), prefill_chunks=float(chunks),
        prefill_gemm_flops=prefill_gemm,
        prefill_expert_flops=2.0 * routed_matmul_params(m) * s / plan.gpus,
        prefill_gemm_per_width=prefill_per_width(m, plan, s, prompts),
        prefill_one_gemm_per_width=prefill_per_width(m, plan, s, 1.0),
        prefill_attention_flops=prefill_attention,
        attention_ranks=float(plan.tp if plan.attention_dp else 1),
        # read only under attention-DP (``_prefill_stage``)
        prefill_attention_gemm_flops=attention_gemm_flops(dev, plan, m, s) / plan.gpus if plan.attention_dp else 0.0,
        prefill_weight_bytes=streamed_weight_bytes(m, plan.precision) / plan.gpus + replicated,
        prefill_dequant_bytes=dequant_bytes(m, plan) / plan.gpus,
        prefill_comm_bw=layers * collectives * p_bw, prefill_comm_latency=layers * collectives * p_lat,
        prefill_send=(s / chunks * m.hidden * ACT_BYTES / link.effective_bw + link.latency) if plan.pp > 1 else 0.0,
        prefill_budget=float(plan.token_budget or TOKEN_BUDGET),
        stages=float(plan.pp), peak=gemm_peak(dev, plan),
        peak_16bit=dev.peak_of("bf16", "fp16"), mem_bw=dev.mem_bw,
    )


def _prefill_stage(t: ServeTerms, p: ServeParams, prompts: Num, per_width: Num) -> Num:
    """A micro-batch's time on a stage, ``prompts`` prompts prefilled together: GEMMs (slower when
    thin: ``gemm_half_width``) and causal attention against reading the weights (``perf.roofline``);
    TP all-reduces of ``s·h`` values twice per layer. Each of ``m`` micro-batches (llama.cpp's
    ``n_ubatch``, PR #6017) reads the weights again (and dequantises a weight-only format again)."""
    m = t.prefill_chunks
    busiest = _busiest(t, prompts)
    gemm = (t.prefill_gemm_flops + (busiest - 1.0) * t.prefill_attention_gemm_flops
            + t.prefill_expert_flops * (1.0 / p.moe_efficiency - 1.0) + p.gemm_half_width * per_width)
    attention = busiest * t.prefill_attention_flops
    compute = prompts * (gemm / (t.peak * p.gemm) + attention / (t.peak_16bit * p.attention))
    return (roofline(t.prefill_weight_bytes / (t.mem_bw * p.mem_bw), compute / m, p.ridge_slowdown)
            + t.prefill_dequant_bytes / (t.mem_bw * p.mem_bw)
            + prompts * t.prefill_comm_bw / m + t.prefill_comm_latency * p.allreduce_latency
            + _handoff(t, p, prompts))


def _busiest(t: ServeTerms, prompts: Num) -> Num:
    """Attention-DP: the busiest GPU's share of ``prompts`` prompts' attention over an even split's
    (its ``attention_ranks`` take ceil(prompts / ranks) each; 1 without it)."""
    return t.attention_ranks * np.ceil(prompts / t.attention_ranks) / np.maximum(prompts, 1.0)


def _prefill(t: ServeTerms, p: ServeParams, prompts: Num, stage: Num, filled: Num = 1.0) -> Num:
    """A prefill pass whose micro-batch takes ``stage`` per stage (``_prefill_stage``): ``m``
    micro-batches queue on the stages asynchronously (GPipe, Huang et al. 2019), ``m + pp − 1`` stages.

    ``filled=0`` is the cost a replica pays per pass when its pipeline is kept full by other work
    (continuous batching under load, where each stage runs other micro-batches while a prompt
    moves on): the ``pp − 1`` fill stages are then spent on other requests, and a pass costs the
    replica ``m`` stage times. ``filled=1`` is the latency of a pass through an idle pipeline."""
    fill = filled * (t.stages - 1.0)
    return (t.prefill_chunks + fill) * stage + prompts * t.prefill_send * np.maximum(fill, 1.0) + p.step_overhead


def _decode_step(t: ServeTerms, p: ServeParams, share: Num = 1.0, admitted: Num = 0.0) -> tuple[Num, dict[str, Num]]:
    """One decode step of ``share`` of the batch the terms were counted at (the weights are read
    whatever the batch; KV reads, FLOPs and all-reduce bytes scale with it), and its parts.

    The weight GEMMs are a roofline (``perf.roofline``) of reading the weights and their FLOPs at
    prefill's GEMM efficiency: small batches are memory-bound whatever that
    efficiency, and at thousands of sequences the GEMMs are a prefill's (a lower decode efficiency
    made those 30-50 % too slow; prefill's thin-GEMM penalty, tried on decode too, made TPOT at a
    batch worse). Routed experts stream as dense weights do, plus ``expert_ramp`` per expert slice;
    their FLOPs run at ``moe_efficiency`` of a dense GEMM's rate. ``admitted`` whole prompts
    prefilled in the same forward pass (TensorRT-LLM's in-flight batching packs context and
    generation tokens into one input; spread over a pipeline's micro-batches) add their GEMM and
    attention FLOPs (the busiest rank's under attention-DP, as ``_prefill_stage``) and all-reduce
    bytes to the step's and share its weight read, which then takes in every expert a prompt touches."""
    moe = 1.0 / p.moe_efficiency - 1.0
    touched, prompt_flops, prompt_attention, prompt_comm = _admitted(t, admitted, moe)
    read = ((t.weight_bytes + touched) / (t.mem_bw * p.mem_bw)
            + expert_ramp(t.expert_bytes + touched, t.expert_slice, p.expert_latency))
    compute = (share * (t.gemm_flops + t.expert_flops * moe) + prompt_flops) / (t.peak * p.gemm)
    gemm = roofline(read, compute, p.ridge_slowdown)
    attention = roofline(share * t.kv_bytes / (t.mem_bw * p.kv_bw),
                         (share * t.attention_flops + prompt_attention) / (t.peak_16bit * p.attention),
                         p.ridge_slowdown)
    comm = share * t.comm_bw + prompt_comm + t.comm_latency * p.allreduce_latency
    work = gemm + attention
    exposed = comm - np.minimum(p.tp_overlap * comm, work)
    overhead = p.step_overhead + t.online * p.server_overhead + share * t.batch * (
        p.seq_overhead + t.online * p.server_seq_overhead)
    launches = t.layers * p.layer_overhead  # per stage: kernel launches not captured in a CUDA graph
    handoff = _handoff(t, p, share * t.batch / np.minimum(t.stages, t.batch))  # a micro-batch's sequences
    gpu = t.slots * (work + exposed + t.send + launches + handoff)
    # an overlap scheduler prepares step n + 1 on the host while the GPU runs step n (NanoFlow, Zhu et
    # al. 2024, arXiv 2408.12757; SGLang 0.4's zero-overhead batch scheduler): the host's work shows
    # only where it outlasts the GPU's, so "overhead" is what is left of it
    exposed_host = np.where(t.overlap > 0, np.maximum(overhead - gpu, 0.0), overhead)
    step = gpu + exposed_host
    parts = {"weights_read": t.slots * read, "kv_read": t.slots * share * t.kv_bytes / (t.mem_bw * p.kv_bw),
             "compute": t.slots * (compute + share * t.attention_flops / (t.peak_16bit * p.attention)),
             "gemm": t.slots * gemm, "attention": t.slots * attention, "tp_comm": t.slots * exposed,
             "pp_send": t.slots * t.send, "pp_handoff": t.slots * handoff, "launches": t.slots * launches,
             EXPOSED_HOST: exposed_host, HOST_WORK: overhead}
    return step, parts


def _admitted(t: ServeTerms, admitted: Num, moe: Num) -> tuple[Num, Num, Num, Num]:
    """What ``admitted`` prompts prefilled inside a decode step add to it: expert bytes read beyond the
    step's, GEMM FLOPs (``moe``: routed experts' extra), attention FLOPs, all-reduce seconds."""
    if isinstance(admitted, float) and admitted == 0.0:  # the usual call (np.float64 is a float too)
        return 0.0, 0.0, 0.0, 0.0
    touched = np.maximum(t.prefill_weight_bytes - t.weight_bytes, 0.0) * (admitted > 0)  # the rest of the experts
    prompts, busiest = admitted / t.slots, _busiest(t, admitted)  # per micro-batch; attention-DP's busiest rank
    flops = prompts * (t.prefill_gemm_flops + (busiest - 1.0) * t.prefill_attention_gemm_flops
                       + t.prefill_expert_flops * moe)
    return touched, flops, prompts * busiest * t.prefill_attention_flops, prompts * t.prefill_comm_bw


# the parts of ``_decode_step``'s parts dict that add up to the step (the others are the two sides of
# the rooflines gemm and attention are: weights and KV cache read, FLOPs; and the host's whole work
# per step, ``HOST_WORK``, of which ``EXPOSED_HOST`` is the share an overlap scheduler leaves showing)
EXPOSED_HOST, HOST_WORK = "overhead", "host_work"
DECODE_SUMMANDS = ("gemm", "attention", "tp_comm", "pp_send", "pp_handoff", "launches", EXPOSED_HOST)


def _mixed_prompt(t: ServeTerms, p: ServeParams, share: Num, mean_batch: Num, mean_step: Num) -> tuple[Num, Num]:
    """What a prompt adds to the decode steps of an engine that prefills inside them (``_admitted``),
    in a steady stream and in a burst's first wave. A step takes in whole prompts, ``mean_batch /
    output_len`` on average: the steps alternate between the whole numbers either side (a roofline is
    convex). A burst's first wave takes in what the token budget holds (read for bursts only)."""
    admitted = mean_batch / t.output_len
    whole = np.floor(admitted)
    part = admitted - whole
    # below a prompt a step (the planner's usual one-plan call) the lower step is the decode step itself
    lo = mean_step if np.ndim(whole) == 0 and whole == 0 else _decode_step(t, p, share, whole)[0]
    steady = ((1.0 - part) * lo + part * _decode_step(t, p, share, whole + 1.0)[0] - mean_step) / admitted
    if not np.any(t.requests > 0):  # the first wave's cost is read for bursts only
        return steady, steady
    wave = np.maximum(np.floor(t.prefill_budget / t.input_len), 1.0)
    return steady, (_decode_step(t, p, share, wave)[0] - mean_step) / wave


def _handoff(t: ServeTerms, p: ServeParams, sequences: Num) -> Num:
    """What an engine spends outside the kernels each time a stage takes a micro-batch of
    ``sequences`` from the one before (receiving it, scheduling its part of each sequence):
    ``stage_overhead`` per sequence on every stage hop of a pipelined replica, nothing without
    pipeline parallelism. TensorRT-LLM's published PP=2/4/8 rows on PCIe cards (a few hundred
    sequences per micro-batch) scale far below the stages' kernel times without it; one sequence
    at a time pays next to nothing."""
    return np.where(t.stages > 1, p.stage_overhead * sequences, 0.0)


def serve_time(t: ServeTerms, p: ServeParams) -> ServeTimes:
    """Decode step, prefill, TPOT, TTFT and throughput. Element-wise arithmetic only.

    A burst of N requests keeps min(N, b) in flight until it drains. With request lengths that
    vary (ShareGPT), the run lasts at least as long as its longest output (``burst.longest_share``,
    no longer than the requests' ``max_tokens`` allows): the mean batch over the run is then
    N·mean / longest, and its steps are the cheaper steps of that smaller batch."""
    step, parts = _decode_step(t, p)
    batch_stage = _prefill_stage(t, p, t.prefill_prompts, t.prefill_gemm_per_width)
    prefill_batch = _prefill(t, p, t.prefill_prompts, batch_stage)
    prefill_one = _prefill(t, p, 1.0, _prefill_stage(t, p, 1.0, t.prefill_one_gemm_per_width))
    # under continuous batching the other sequences' micro-batches keep the pipeline's other stages
    # busy (TensorRT-LLM and vLLM keep pp micro-batches in flight): with b − 1 others for pp − 1
    # stages, a prompt costs the replica its stage time only once b ≥ pp
    idle = np.clip(1.0 - (t.batch - 1.0) / np.maximum(t.stages - 1.0, 1.0), 0.0, 1.0)
    per_prompt = np.where(t.static > 0, prefill_batch,
                          _prefill(t, p, t.prefill_prompts, batch_stage, idle)) / t.prefill_prompts
    longest_of_burst = longest_share(t.requests, np.minimum(p.longest_output, t.output_cap))
    longest = t.output_len * (1.0 + t.variable * (longest_of_burst - 1.0))
    mean_batch = np.where(t.requests > 0, np.minimum(t.batch, t.requests * t.output_len / longest), t.batch)
    share = mean_batch / t.batch
    mean_step, _ = _decode_step(t, p, share)
    # continuous: every output_len steps each sequence is replaced and its prompt prefilled
    front = per_prompt  # a prompt's cost while a burst's first wave is admitted
    if np.any(t.mixed > 0):
        mixed = (t.mixed > 0) & (t.static <= 0)
        steady_cost, wave_cost = _mixed_prompt(t, p, share, mean_batch, mean_step)
        per_prompt, front = np.where(mixed, steady_cost, per_prompt), np.where(mixed, wave_cost, front)
    steady = mean_batch * per_prompt / t.output_len
    tpot_continuous = mean_step + steady
    static_total = prefill_batch + t.output_len * step
    # a request's TPOT carries the prompts prefilled while it decodes, the throughput all of them
    others = burst_prefill_share(t.requests, t.batch, t.input_len, t.output_len, t.prefill_budget, front,
                                 steady, 1.0 - t.variable)
    tpot = np.where(t.static > 0, step, mean_step + others)
    rate = np.where(t.static > 0, t.batch * t.output_len / static_total, mean_batch / tpot_continuous)
    # the engine's front end (HTTP, tokenising, detokenising) handles requests one after another in
    # its own process: it caps the request rate whatever the GPUs could do
    rate = np.minimum(rate, t.output_len / np.maximum(p.request_overhead, 1e-9))
    steady_ttft = prefill_one + np.where(t.batch > 1, step, 0.0)
    burst = burst_ttft(t.requests, t.batch, t.output_len, t.prefill_prompts, prefill_batch, tpot_continuous, step)
    ttft = np.where(t.static > 0, prefill_batch, np.where(t.requests > 0, burst, steady_ttft))
    return ServeTimes(step, prefill_one, tpot, ttft, rate, parts)


def serve(m: ModelSpec, hw: Hardware, plan: ServePlan, params: ServeParams) -> ServeResult:
    """Predict one replica. Without ``plan.batch``: maximum load, the largest batch that fits."""
    cap = max_batch(m, hw, plan)
    batch = plan.batch if plan.batch is not None else max(cap, 1)
    memory = serve_memory(m, plan, batch)
    terms = serve_terms(m, hw, plan, batch)
    times = serve_time(terms, params)
    rate = float(times.output_tokens_per_s)
    return ServeResult(
        fits=sum(memory.values()) <= hw.device.memory * plan.memory_fraction and cap >= 1,
        max_batch=cap,
        batch=batch,
        memory_per_gpu=sum(memory.values()),
        memory_capacity=hw.device.memory * plan.memory_fraction,  # the engine's share of the GPU
        memory_total=hw.device.memory,
        memory_breakdown=tuple(memory.items()),
        ttft=float(times.ttft),
        tpot=float(times.tpot),
        decode_step=float(times.decode_step),
        output_tokens_per_s=rate,
        total_tokens_per_s=rate * (plan.input_len + plan.output_len) / plan.output_len,
        requests_per_s=rate / plan.output_len,
        decode_breakdown=tuple((k, float(v)) for k, v in times.parts.items()),
        kv_read_factor=float(terms.kv_read_factor),
    )
