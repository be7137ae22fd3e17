"""Training step time, throughput and utilisation for one configuration.

Two halves. ``train_terms`` counts the work of one optimizer step on the busiest GPU at unit
efficiency: FLOPs by kind, bytes moved by memory-bound kernels, and the seconds each collective
takes at its links' catalog efficiency. ``step_time`` turns those terms into seconds with the
efficiency parameters of the GPU family and the software stack (``TrainParams``); it is plain
arithmetic, so the calibration can evaluate it over arrays of rows.

One step of one data-parallel replica is ``m`` micro-batches through ``pp`` stages: 1F1B takes
``m + (pp − 1)/v`` micro-batch slots with ``v`` interleaved chunks per GPU (Narayanan et al. 2021,
arXiv 2104.04473, eq. 1 and section 2.2.2). Per micro-batch and stage: compute; the TP collectives
of ``s·b·h`` values (two forward and two backward per layer, Shoeybi et al. 2019; two more under
full recompute), exposed unless the stack overlaps them with GEMMs (Megatron-Core's userbuffers,
Wang et al. 2022 arXiv 2105.05720; MegaScale, Jiang et al. 2024 arXiv 2402.15627); context-parallel
ring exchanges hidden behind the attention they feed; expert all-to-alls (GShard, Lepikhin et al.
2020); and ``2·v`` stage-boundary sends. Then the data-parallel gradient reduction, hidden behind
the last micro-batch's backward as far as the stack overlaps it, the optimizer update, the stack's
fixed per-step overhead, and a slowdown that grows with the number of servers (stragglers and
jitter: MegaScale section 4 measures MFU falling from 53 % at 256 GPUs to 41 % at 12,288).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from optimizer.perf import model as shape
from optimizer.perf.comm import allreduce_time, dp_reduce_time, p2p_time, span_link
from optimizer.perf.memory import WEIGHT_BYTES, MemoryResult, mlp_activation_width, training_memory
from optimizer.perf.params import Num, TrainParams
from optimizer.perf.specs import Hardware, ModelSpec, TrainPlan, evolve

ACT_BYTES = 2
OPTIMIZER_BYTES_TOUCHED = 32  # per parameter: read and write weights, grads, master, m, v
NO_FLASH_SCORE_BYTES = 27.0  # per score per layer without FlashAttention: QKᵀ, softmax, dropout, fwd + bwd


@dataclass(frozen=True)
class TrainTerms:
    """One optimizer step's work on the busiest GPU at unit efficiency (any field may be an array)."""

    micro_batches: Num  # m, per data-parallel replica
    bubble_slots: Num  # (pp − 1)/v micro-batch slots of pipeline fill and drain
    gemm_flops: Num  # per micro-batch: matmuls over weights, recompute included, at the plan's precision
    gemm_flops_per_width: Num  # per micro-batch: Σ FLOPs / narrowest side, for GEMMs too thin to fill the GPU
    attention_flops: Num  # per micro-batch: scores and context, recompute included, in 16-bit
    elementwise: Num  # per micro-batch: tokens × layers × (hidden + MLP activation width + routed copies)
    # (× 4/3 when the forward is recomputed)
    layer_passes: Num  # layers a micro-batch crosses on this GPU (forward and backward)
    moe_layer_passes: Num  # of which mixture-of-experts layers
    score_bytes: Num  # per micro-batch: attention scores through memory (no FlashAttention)
    peak: Num  # FLOP/s, dense, at the plan's precision
    peak_16bit: Num  # FLOP/s, dense bf16 (fp16 where the GPU has no bf16)
    gemm_share: Num  # share of ``peak`` a matmul reaches on the part (``Device.achievable_share``)
    mem_bw: Num  # bytes/s
    tp_comm: Num  # s per micro-batch
    cp_comm: Num  # s per micro-batch (before the attention it hides behind)
    ep_comm: Num  # s per micro-batch
    pp_comm: Num  # s per micro-batch
    fsdp_comm: Num  # s per micro-batch: ZeRO-3 weight all-gathers and gradient reduce-scatter
    dp_comm: Num  # s per step: gradient reduction (and parameter all-gather under ZeRO-1/2)
    optimizer_bytes: Num  # per step, streamed by the update
    nodes: Num  # servers the job spans
    tokens_per_step: Num  # whole job
    gpus: Num
    model_flops_per_token: Num
    hardware_flops_per_token: Num


@dataclass(frozen=True)
class StepParts:
    """Seconds per step by term (any field may be an array)."""

    compute: Num
    tp_comm: Num
    cp_comm: Num
    ep_comm: Num
    pp_comm: Num
    fsdp_comm: Num
    pp_bubble: Num
    layer_overhead: Num
    dp_comm_exposed: Num
    optimizer: Num
    overhead: Num
    stragglers: Num

    @property
    def total(self) -> Num:
        return (self.compute + self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm + self.fsdp_comm
                + self.pp_bubble + self.layer_overhead + self.dp_comm_exposed + self.optimizer + self.overhead
                + self.stragglers)

    def items(self) -> tuple[tuple[str, float], ...]:
        return tuple((name, float(getattr(self, name))) for name in self.__dataclass_fields__)


@dataclass(frozen=True)
class TrainResult:
    """What ``estimate train`` prints; ``breakdown`` is seconds per step by term."""

    fits: bool
    memory: MemoryResult
    memory_capacity: float  # bytes per GPU a plan may use: the GPU's memory less the headroom
    memory_total: float  # the GPU's memory
    step_time: float
    tokens_per_step: int
    tokens_per_s: float  # whole configuration (all GPUs)
    flops_per_gpu: float  # model FLOP/s per GPU (MFU convention)
    hardware_flops_per_gpu: float  # executed FLOP/s per GPU, recompute included (HFU)
    mfu: float
    hfu: float
    breakdown: tuple[tuple[str, float], ...]

    def days(self, tokens: float) -> float:
        return tokens / self.tokens_per_s / 86400.0


def params_per_gpu(m: ModelSpec, plan: TrainPlan) -> float:
    """Parameters on one GPU before ZeRO: TP × PP split everything, EP also the routed experts."""
    experts_elsewhere = shape.expert_params(m) * (1.0 - 1.0 / plan.ep) if m.moe else 0.0
    return (shape.param_count(m) - experts_elsewhere) / (plan.tp * plan.pp)


def optimizer_bytes(m: ModelSpec, plan: TrainPlan) -> float:
    """The Adam update streams weights, gradients, master weights and both moments (~32 bytes per
    parameter); ZeRO ≥ 1 leaves each GPU 1/dp of the parameters."""
    return params_per_gpu(m, plan) / (plan.grad_ranks if plan.zero >= 1 else 1) * OPTIMIZER_BYTES_TOUCHED


def _flops_per_token(m: ModelSpec, plan: TrainPlan, tokens_mb: float) -> tuple[float, float, float, float]:
    return _stage_flops(m, plan.tp, plan.pp, plan.ep, plan.recompute, plan.flash_attention, plan.seq_len or m.seq_len,
                        tokens_mb)


@lru_cache(maxsize=4096)  # pure; the planner asks for the same plan shape at every dp and on every server
def _stage_flops(m: ModelSpec, tp: int, pp: int, ep: int, recompute: str, flash_attention: bool, s: int,
                 tokens_mb: float) -> tuple[float, float, float, float]:
    """(GEMM FLOPs, GEMM FLOPs per unit of narrowest side, attention FLOPs, element-wise units) per
    token on one GPU of a stage.

    GEMMs over the weights: 6 per matmul parameter (Narayanan et al. eq. 3), the LM head included;
    attention 12·s·h per layer (3 × the forward's 4·s·h), half of it under FlashAttention's causal
    skipping; full recompute repeats the forward
    (+2 per parameter, +4·s·h), selective recompute only attention's (Korthikanti et al. 2022,
    arXiv 2205.05198, section 5). Memory-bound kernels (norms, activation functions, residuals,
    dropout, casts, an MoE layer's token permutation) move ``elementwise_bytes`` bytes per unit of
    width a token passes through per layer: the hidden size, the MLP's activation width, and the
    ``k`` copies an MoE layer routes; a third more when the forward runs twice.
    """
    layers = m.layers
    passes = 3.0 + (1.0 if recompute == "full" else 0.0)  # forward, backward (2), recomputed forward
    gemm, per_width = 0.0, 0.0
    for flops, width in shape.gemm_shapes(m, tp, ep, tokens_mb):
        gemm += passes * flops * layers
        per_width += passes * flops * layers / max(width, 1.0)
    head = 6.0 * m.vocab * m.hidden / tp
    gemm += head
    per_width += head / max(1.0, min(m.hidden, m.vocab / tp, tokens_mb))
    # executed attention: FlashAttention skips the masked half of a causal score matrix (and windowed
    # layers attend to at most their window); unfused kernels compute every score (Dao 2023, sec. 3)
    executed = shape.mixing_flops_per_token(m, m.attended(s / 2.0 if flash_attention else s)) / m.layers
    attention = 3.0 * executed * layers
    routed = m.experts_active * m.hidden * m.moe_layers / layers if m.moe else 0.0
    elementwise = (m.hidden + mlp_activation_width(m) + routed) * layers
    if recompute == "full":
        attention += executed * layers
        elementwise *= 4.0 / 3.0
    elif recompute == "selective":
        attention += executed * layers
    return gemm / pp, per_width / pp, attention / (tp * pp), elementwise / (tp * pp)


def _check(m: ModelSpec, hw: Hardware, plan: TrainPlan) -> None:
    if not hw.device.peak(plan.precision):
        raise ValueError(f"{hw.device.name} has no {plan.precision} tensor cores")
    if (plan.seq_len or m.seq_len) % plan.cp:
        raise ValueError(f"context parallelism {plan.cp} must divide the sequence length "
                         f"{plan.seq_len or m.seq_len}")
    if plan.ep > 1 and (not m.moe or plan.dp % plan.ep or plan.ep > m.experts):
        raise ValueError(f"expert parallelism {plan.ep} needs an MoE model with at least {plan.ep} experts "
                         f"and a data-parallel degree divisible by it (dp {plan.dp})")


def _micro_batch_comm(m: ModelSpec, hw: Hardware, plan: TrainPlan, tokens_mb: float) -> dict[str, float]:
    """Seconds per micro-batch of each model-parallel collective, at the links' catalog efficiency."""
    tp, pp = plan.tp, plan.pp
    layers = math.ceil(m.layers / pp)
    out = {"tp": 0.0, "cp": 0.0, "ep": 0.0, "pp": 0.0}
    if tp > 1:
        n_collectives = 4 + (2 if plan.recompute == "full" else 0)
        buf = tokens_mb * m.hidden * ACT_BYTES
        out["tp"] = layers * n_collectives * allreduce_time(buf, tp, span_link(tp, hw))
    if plan.cp > 1:  # ring attention: K and V of the other cp − 1 chunks forward; K, V, dK, dV backward
        kv = tokens_mb * shape.kv_width(m) * ACT_BYTES / tp
        link = span_link(tp * plan.cp, hw, 2)  # a ring: each GPU sends to its neighbour
        out["cp"] = layers * 3 * (plan.cp - 1) * (kv / link.effective_bw + link.latency)
    if m.moe and plan.ep > 1:  # dispatch and combine, forward and backward
        buf = tokens_mb * m.experts_active * m.hidden * ACT_BYTES / tp
        link = span_link(plan.ep * plan.tp, hw, plan.ep)
        a2a = buf * (plan.ep - 1) / plan.ep / link.effective_bw + link.latency
        out["ep"] = math.ceil(m.moe_layers / pp) * 4 * a2a
    if pp > 1:  # a micro-batch crosses v·pp stage boundaries, forward and backward
        buf = tokens_mb * m.hidden * ACT_BYTES / (tp if plan.sequence_parallel else 1)
        out["pp"] = 2.0 * plan.virtual_stages * p2p_time(buf, span_link(plan.replica_gpus, hw, 2))
    return out


def data_parallel_comm(m: ModelSpec, hw: Hardware, plan: TrainPlan) -> tuple[float, float]:
    """(seconds per step, seconds per micro-batch) of data-parallel traffic.

    Without ZeRO the gradients (``grad_reduce_bytes`` per parameter: fp32 in Megatron and FSDP by
    default) are all-reduced once a step. ZeRO-1/2 (Megatron's distributed optimizer) reduce-scatter
    them and all-gather the updated 16-bit weights: each is half an all-reduce of its buffer.
    ZeRO-3 / FSDP all-gathers the weights for every micro-batch's forward and backward and
    reduce-scatters its gradients (Rajbhandari et al. 2020; Zhao et al. 2023, arXiv 2304.11277).
    Routed experts split over EP are reduced apart from the dense weights, over the DP/EP ranks
    that hold the same experts (``dp_reduce_time``'s expert-data-parallel group).
    """
    if plan.grad_ranks <= 1:
        return 0.0, 0.0
    experts = shape.expert_params(m) / (plan.ep * plan.tp * plan.pp) if m.moe and plan.ep > 1 else 0.0
    per_step = per_micro_batch = 0.0
    for local, ep in ((params_per_gpu(m, plan) - experts, 1), (experts, plan.ep)):
        grads = local * plan.grad_reduce_bytes
        weights = local * WEIGHT_BYTES
        if plan.zero >= 3:
            gather = dp_reduce_time(weights, plan, hw, ep) / 2.0
            per_micro_batch += 2.0 * gather + dp_reduce_time(grads, plan, hw, ep) / 2.0
        elif plan.zero >= 1:
            per_step += (dp_reduce_time(grads, plan, hw, ep) + dp_reduce_time(weights, plan, hw, ep)) / 2.0
        else:
            per_step += dp_reduce_time(grads, plan, hw, ep)
    return per_step, per_micro_batch


def train_terms(m: ModelSpec, hw: Hardware, plan: TrainPlan) -> TrainTerms:
    """The work of one step on the busiest GPU (the first pipeline stage), at unit efficiency."""
    replica = replica_terms(m, hw, plan)
    dp_step, fsdp_mb = data_parallel_comm(m, hw, plan)
    return evolve(replica, dp_comm=dp_step, fsdp_comm=fsdp_mb, optimizer_bytes=optimizer_bytes(m, plan),
                  nodes=float(max(1, math.ceil(plan.gpus / hw.gpus_per_node))),
                  tokens_per_step=step_tokens(m, plan), gpus=float(plan.gpus))


def step_tokens(m: ModelSpec, plan: TrainPlan) -> float:
    """Tokens one step trains: dp replicas × micro-batches × micro-batch × sequence length."""
    return float(plan.dp * plan.num_micro_batches * plan.micro_batch * (plan.seq_len or m.seq_len))


def replica_terms(m: ModelSpec, hw: Hardware, plan: TrainPlan) -> TrainTerms:
    """The terms no data-parallel degree changes: one replica's compute and model-parallel
    traffic, on one node, with no data-parallel traffic, optimizer step, tokens or GPUs yet
    (``train_terms`` adds those for the plan's dp)."""
    _check(m, hw, plan)
    dev = hw.device
    s = plan.seq_len or m.seq_len
    tokens_mb = plan.micro_batch * s / plan.cp  # tokens of a micro-batch on one GPU
    gemm, per_width, attention, elementwise = _flops_per_token(m, plan, tokens_mb)
    layers = math.ceil(m.layers / plan.pp)
    scores = 0.0 if plan.flash_attention else (NO_FLASH_SCORE_BYTES * m.heads * s * layers / plan.tp
                                                * shape.full_attention_share(m))  # linear layers score nothing
    comm = _micro_batch_comm(m, hw, plan, tokens_mb)
    peak_16 = dev.peak_of("bf16", "fp16", plan.precision)
    return TrainTerms(
        micro_batches=float(plan.num_micro_batches),
        bubble_slots=(plan.pp - 1) / plan.virtual_stages,
        gemm_flops=gemm * tokens_mb, gemm_flops_per_width=per_width * tokens_mb, attention_flops=attention * tokens_mb,
        elementwise=elementwise * tokens_mb, layer_passes=float(layers),
        moe_layer_passes=float(math.ceil(m.moe_layers / plan.pp)) if m.moe else 0.0,
        score_bytes=scores * tokens_mb, peak=dev.peak_of(plan.precision), peak_16bit=peak_16, mem_bw=dev.mem_bw,
        gemm_share=dev.achievable_share(plan.precision),
        tp_comm=comm["tp"], cp_comm=comm["cp"], ep_comm=comm["ep"], pp_comm=comm["pp"], fsdp_comm=0.0,
        dp_comm=0.0, optimizer_bytes=0.0, nodes=1.0, tokens_per_step=0.0, gpus=0.0,
        model_flops_per_token=shape.model_flops_per_token(m, s),
        hardware_flops_per_token=shape.hardware_flops_per_token(m, plan.recompute, s),
    )


def _exposed(comm: Num, hidden_share: Num, window: Num) -> Num:
    """What a collective leaves on the critical path: at most ``hidden_share`` of it hides, and no
    more than the compute it can run beside (``window``)."""
    return comm - np.minimum(hidden_share * comm, window)


def step_time(t: TrainTerms, p: TrainParams) -> StepParts:
    """Seconds per step by term. Element-wise arithmetic only, so ``t`` and ``p`` may hold arrays."""
    gemm = (t.gemm_flops + p.gemm_half_width * t.gemm_flops_per_width) / (t.peak * t.gemm_share * p.gemm)
    attention = t.attention_flops / (t.peak_16bit * p.attention)
    memory = (t.elementwise * p.elementwise_bytes + t.score_bytes) / (t.mem_bw * p.mem_bw)
    compute_mb = gemm + attention + memory
    launches = t.layer_passes * p.layer_overhead + t.moe_layer_passes * p.moe_layer_overhead
    tp = t.tp_comm * (1.0 - p.tp_overlap)
    cp = np.maximum(0.0, t.cp_comm - attention)  # the exchange hides behind the attention it feeds
    ep = t.ep_comm * (1.0 - p.ep_overlap)
    pp = t.pp_comm * (1.0 - p.pp_overlap)
    fsdp = _exposed(t.fsdp_comm, p.dp_overlap, compute_mb)
    per_mb = compute_mb + launches + tp + cp + ep + pp + fsdp
    backward_last = compute_mb * 2.0 / 3.0
    dp = _exposed(t.dp_comm, p.dp_overlap, backward_last)
    optimizer = t.optimizer_bytes / (t.mem_bw * p.mem_bw)
    base = (t.micro_batches + t.bubble_slots) * per_mb + dp + optimizer + p.step_overhead
    m = t.micro_batches
    return StepParts(
        compute=m * compute_mb, layer_overhead=m * launches,
        tp_comm=m * tp, cp_comm=m * cp, ep_comm=m * ep, pp_comm=m * pp, fsdp_comm=m * fsdp,
        pp_bubble=t.bubble_slots * per_mb, dp_comm_exposed=dp, optimizer=optimizer, overhead=p.step_overhead,
        stragglers=base * p.straggler * np.log2(t.nodes),
    )


def train_step(m: ModelSpec, hw: Hardware, plan: TrainPlan, params: TrainParams,
               reserved_memory: float = 0.0, headroom: float = 0.0) -> TrainResult:
    """Predict one configuration; it fits when its memory stays within the GPU's memory less
    ``headroom`` (a share kept free for allocator fragmentation). Raises ValueError for a
    precision the GPU lacks."""
    terms = train_terms(m, hw, plan)
    parts = step_time(terms, params)
    step = float(parts.total)
    memory = training_memory(m, plan, reserved_memory)
    tokens_per_s = float(terms.tokens_per_step) / step
    flops_gpu = float(terms.model_flops_per_token) * tokens_per_s / plan.gpus
    hw_flops_gpu = float(terms.hardware_flops_per_token) * tokens_per_s / plan.gpus
    return TrainResult(
        fits=memory.total <= hw.device.memory * (1.0 - headroom),
        memory=memory,
        memory_capacity=hw.device.memory * (1.0 - headroom),
        memory_total=hw.device.memory,
        step_time=step,
        tokens_per_step=int(terms.tokens_per_step),
        tokens_per_s=tokens_per_s,
        flops_per_gpu=flops_gpu,
        hardware_flops_per_gpu=hw_flops_gpu,
        mfu=flops_gpu / float(terms.peak),
        hfu=hw_flops_gpu / float(terms.peak),
        breakdown=parts.items(),
    )
