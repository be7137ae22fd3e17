"""Training step time, throughput and utilisation for one configuration.

One optimizer step of one data-parallel replica is ``m`` micro-batches through ``pp`` stages
(1F1B: ``(m + pp − 1)`` micro-batch slots, bubble fraction ``(pp−1)/(m+pp−1)``, Narayanan et
al. 2021 eq. 1; with ``v`` interleaved chunks per GPU the bubble is ``(pp−1)/v`` slots),
then the gradient reduction over DP and the optimizer update. Per micro-batch
and stage: compute at the GPU's achievable FLOP/s, the TP all-reduces of ``s·b·h`` values
(two forward and two backward per layer, Shoeybi et al. 2019; two more under full recompute)
and the stage-boundary sends of ``s·b·h`` values. Collectives are ring-based:
``2(n−1)/n`` of the buffer crosses each link; across nodes the reduction is hierarchical
(NVLink inside the node, the node's NICs between nodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optimizer.perf import model as shape
from optimizer.perf.memory import GRAD_BYTES, WEIGHT_BYTES, MemoryResult, training_memory
from optimizer.perf.specs import Efficiency, Hardware, Link, ModelSpec, TrainPlan

ACT_BYTES = 2
OPTIMIZER_BYTES_TOUCHED = 32  # per parameter: read and write weights, grads, master, m, v


@dataclass(frozen=True)
class TrainResult:
    """What ``estimate train`` prints; ``breakdown`` is seconds per step by term."""

    fits: bool
    memory: MemoryResult
    memory_capacity: float
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


def collective_latency(n: int, link: Link) -> float:
    """Fixed cost of one collective among ``n`` ranks.

    The catalog's latency is that of one all-reduce among the 8 GPUs of a server (DESIGN.md:
    ~20 µs on NVLink, ~30 µs on GeForce PCIe); a tree grows it with log2(n) beyond that.
    """
    return link.latency * max(1.0, math.log2(n) / 3.0)


def allreduce_time(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` among ``n`` ranks: 2(n−1)/n of it crosses each link."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / link.effective_bw + collective_latency(n, link)


def p2p_time(nbytes: float, link: Link) -> float:
    return nbytes / link.effective_bw + link.latency


def dp_reduce_time(nbytes: float, plan: TrainPlan, hw: Hardware) -> float:
    """Hierarchical all-reduce over the DP group: inside the node, then between nodes.

    ``k`` DP ranks share a node; after the intra-node reduce-scatter each holds 1/k of the
    buffer, and all the node's GPUs drive its NICs at once, so each gets 1/gpus_per_node of
    the node's network bandwidth.
    """
    dp = plan.grad_ranks
    if dp <= 1:
        return 0.0
    model_parallel = plan.tp * plan.pp
    k = max(1, min(dp, hw.gpus_per_node // model_parallel))
    nodes = math.ceil(dp / k)
    intra = allreduce_time(nbytes, k, hw.group_link(k * model_parallel)) if k > 1 else 0.0
    if nodes <= 1:
        return intra
    if hw.network is None:
        raise ValueError("a multi-node plan needs a network")
    share = min(hw.gpus_per_node, model_parallel * k)
    per_gpu = Link(hw.network.name, hw.network.bw_one_way / share, hw.network.efficiency, hw.network.latency)
    return intra + allreduce_time(nbytes / k, nodes, per_gpu)


def span_link(size: int, hw: Hardware) -> Link:
    """The link a group of ``size`` GPUs talks over: the node's link when the group fits in a
    node, else each GPU's share of the node's network."""
    if size <= hw.gpus_per_node or hw.network is None:
        return hw.group_link(size)
    return Link(hw.network.name, hw.network.bw_one_way / hw.gpus_per_node, hw.network.efficiency,
                hw.network.latency)


def params_per_gpu(m: ModelSpec, plan: TrainPlan) -> float:
    """Parameters on one GPU before ZeRO: TP × PP split everything, EP also the routed experts."""
    experts_elsewhere = shape.expert_params(m) * (1.0 - 1.0 / plan.ep) if m.moe else 0.0
    return (shape.param_count(m) - experts_elsewhere) / (plan.tp * plan.pp)


def optimizer_time(m: ModelSpec, plan: TrainPlan, hw: Hardware, eff: Efficiency) -> float:
    """The Adam update is memory-bound: it streams weights, gradients, master weights and both
    moments (~32 bytes per parameter); ZeRO ≥ 1 leaves each GPU 1/dp of the parameters."""
    opt_params = params_per_gpu(m, plan) / (plan.grad_ranks if plan.zero >= 1 else 1)
    return opt_params * OPTIMIZER_BYTES_TOUCHED / (hw.device.mem_bw * eff.mem_bw)


def compute_time(m: ModelSpec, hw: Hardware, plan: TrainPlan, eff: Efficiency) -> float:
    """Seconds of GPU work per token on one GPU of a stage (forward + backward + recompute).

    Three kinds of kernel, each at its own speed: GEMMs over the weights at the GPU's matmul
    efficiency; attention (12·s·h per layer, +4·s·h recomputed under selective or full
    recompute) at ``attention_kernel`` times that; and memory-bound element-wise kernels moving
    ``elementwise_bytes · h`` bytes per layer (a third more when the forward is recomputed).
    Without FlashAttention the s×s scores also pass through memory: about 27 bytes per score per
    layer (QKᵀ, softmax and dropout, forward and backward).
    """
    s = plan.seq_len or m.seq_len
    dev = hw.device
    rate = dev.peak(plan.precision) * dev.efficiency(plan.precision)
    bw = dev.mem_bw * eff.mem_bw
    layers = m.layers
    gemm = 6.0 * shape.matmul_params_per_layer(m) * layers + 6.0 * m.vocab * m.hidden
    attention = 12.0 * s * m.hidden * layers
    elementwise = eff.elementwise_bytes * m.hidden * layers
    if plan.recompute == "full":
        gemm += 2.0 * shape.matmul_params_per_layer(m) * layers
        attention += 4.0 * s * m.hidden * layers
        elementwise *= 4.0 / 3.0
    elif plan.recompute == "selective":
        attention += 4.0 * s * m.hidden * layers
    scores = 0.0 if plan.flash_attention else 27.0 * m.heads * s * layers
    gpu_share = plan.tp * plan.pp
    return (gemm / rate + attention / (rate * eff.attention_kernel) + (elementwise + scores) / bw) / gpu_share


def train_step(m: ModelSpec, hw: Hardware, plan: TrainPlan, eff: Efficiency) -> TrainResult:
    """Predict one configuration. Raises ValueError for a precision the GPU lacks."""
    dev = hw.device
    peak = dev.peak(plan.precision)
    if not peak:
        raise ValueError(f"{dev.name} has no {plan.precision} tensor cores")
    if (plan.seq_len or m.seq_len) % plan.cp:
        raise ValueError(f"context parallelism {plan.cp} must divide the sequence length "
                         f"{plan.seq_len or m.seq_len}")
    if plan.ep > 1 and (not m.moe or plan.dp % plan.ep or plan.ep > m.experts):
        raise ValueError(f"expert parallelism {plan.ep} needs an MoE model with at least {plan.ep} experts "
                         f"and a data-parallel degree divisible by it (dp {plan.dp})")
    s = plan.seq_len or m.seq_len
    tp, pp, b, mb = plan.tp, plan.pp, plan.micro_batch, plan.num_micro_batches
    layers = math.ceil(m.layers / pp)

    memory = training_memory(m, plan, eff.reserved_memory)

    hw_flops_token = shape.hardware_flops_per_token(m, plan.recompute, s)
    model_flops_token = shape.model_flops_per_token(m, s)
    tokens_mb = b * s / plan.cp  # tokens of a micro-batch on one GPU (CP splits the sequence)
    compute_mb = compute_time(m, hw, plan, eff) * tokens_mb

    tp_mb = 0.0
    if tp > 1:
        n_allreduce = 4 + (2 if plan.recompute == "full" else 0)
        buf = tokens_mb * m.hidden * ACT_BYTES
        tp_mb = layers * n_allreduce * allreduce_time(buf, tp, hw.group_link(tp)) * (1.0 - eff.tp_overlap)

    cp_mb = 0.0
    if plan.cp > 1:  # ring attention: K and V of the other cp − 1 chunks, forward; K, V, dK, dV back
        kv = tokens_mb * 2 * m.kv_hidden * ACT_BYTES / tp
        link = span_link(tp * plan.cp, hw)
        ring = 3 * (plan.cp - 1) * (kv / link.effective_bw + link.latency)
        attention = (3 * shape.attention_flops_per_token_layer(m, s) * tokens_mb / (tp * pp)
                     / (dev.peak(plan.precision) * dev.efficiency(plan.precision) * eff.attention_kernel))
        cp_mb = layers * max(0.0, ring - attention)  # the exchange hides behind the attention it feeds

    ep_mb = 0.0
    if m.moe and plan.ep > 1:  # dispatch and combine, forward and backward (GShard, Lepikhin et al. 2020)
        buf = tokens_mb * m.experts_active * m.hidden * ACT_BYTES / tp
        link = span_link(plan.ep * plan.tp, hw)
        a2a = buf * (plan.ep - 1) / plan.ep / link.effective_bw + link.latency
        ep_mb = math.ceil(m.moe_layers / pp) * 4 * a2a

    v = plan.virtual_stages
    pp_mb = 0.0
    if pp > 1:  # a micro-batch crosses v·pp stage boundaries, forward and backward
        buf = tokens_mb * m.hidden * ACT_BYTES / (tp if plan.sequence_parallel else 1)
        pp_mb = 2.0 * v * p2p_time(buf, span_link(plan.replica_gpus, hw))

    # 1F1B: m + (pp − 1) micro-batch slots; interleaving v chunks shrinks the bubble v-fold
    slots = mb + (pp - 1) / v
    per_mb = compute_mb + tp_mb + cp_mb + ep_mb + pp_mb
    compute = mb * compute_mb
    bubble = (pp - 1) / v * per_mb

    params_gpu = params_per_gpu(m, plan)
    grad_bytes = params_gpu * GRAD_BYTES
    dp_time = dp_reduce_time(grad_bytes, plan, hw)
    if plan.zero >= 3 and plan.grad_ranks > 1:
        # weights are all-gathered for the forward and again for the backward of every
        # micro-batch (FSDP/ZeRO-3); each all-gather moves half an all-reduce's bytes
        gather = dp_reduce_time(params_gpu * WEIGHT_BYTES, plan, hw) / 2.0
        dp_time += 2.0 * mb * gather
    backward = compute * 2.0 / 3.0
    hidden = min(eff.dp_overlap * dp_time, backward)
    dp_exposed = dp_time - hidden

    optimizer = optimizer_time(m, plan, hw, eff)

    step = slots * per_mb + dp_exposed + optimizer
    tokens_step = plan.dp * mb * b * s
    tokens_per_s = tokens_step / step
    gpus = plan.gpus
    flops_gpu = model_flops_token * tokens_per_s / gpus
    hw_flops_gpu = hw_flops_token * tokens_per_s / gpus
    breakdown = (
        ("compute", compute),
        ("tp_comm", mb * tp_mb),
        ("cp_comm", mb * cp_mb),
        ("ep_comm", mb * ep_mb),
        ("pp_comm", mb * pp_mb),
        ("pp_bubble", bubble),
        ("dp_comm_exposed", dp_exposed),
        ("optimizer", optimizer),
    )
    return TrainResult(
        fits=memory.total <= dev.memory,
        memory=memory,
        memory_capacity=dev.memory,
        step_time=step,
        tokens_per_step=tokens_step,
        tokens_per_s=tokens_per_s,
        flops_per_gpu=flops_gpu,
        hardware_flops_per_gpu=hw_flops_gpu,
        mfu=flops_gpu / peak,
        hfu=hw_flops_gpu / peak,
        breakdown=breakdown,
    )
