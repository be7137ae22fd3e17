"""Collective communication times: ring all-reduce, reduce-scatter, all-gather, point-to-point.

Ring collectives move ``2(n−1)/n`` of the buffer across each link for an all-reduce and
``(n−1)/n`` for a reduce-scatter or an all-gather (Patarasuk & Yuan 2009; NCCL's "bus bandwidth"
convention). Across servers the reduction is hierarchical: inside the node over NVLink (or
PCIe), then between nodes over each GPU's share of the node's NICs. Times are at the links'
catalog efficiency; how much of them a stack hides behind compute is the performance model's
business (``optimizer.perf.train``).
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np

from optimizer.perf.params import Num
from optimizer.perf.specs import Hardware, Link, ServePlan, TrainPlan


def collective_latency(n: int, link: Link) -> float:
    """Fixed cost of one collective among ``n`` ranks.

    The catalog's latency is that of one all-reduce among the 8 GPUs of a server (DESIGN.md:
    ~20 µs on NVLink, ~40 µs on GeForce PCIe without peer-to-peer, measured); a tree grows it with log2(n) beyond that.
    """
    return link.latency * max(1.0, math.log2(n) / 3.0)


def tp_link(hw: Hardware, tp: int) -> Link | None:
    """The link a TP group's all-reduces cross inside one node (None without TP)."""
    return hw.group_link(tp) if tp > 1 else None


def collectives_per_layer(plan: ServePlan) -> int:
    """All-reduce equivalents per layer in a TP group. Tensor parallelism all-reduces twice (after
    attention and after the MLP; Shoeybi et al. 2019, fig. 3). With attention data parallelism
    each GPU runs attention for its own sequences with the whole attention weights, so only the
    MoE block communicates: its tokens are all-gathered into the group and the expert outputs
    reduce-scattered back, one all-reduce's bytes and steps (a ring all-reduce is a reduce-scatter
    and an all-gather; TensorRT-LLM's DeepSeek-R1 throughput blog, SGLang's DP-attention blog)."""
    return 1 if plan.attention_dp else 2


def tp_allreduce_parts(nbytes: Num, hw: Hardware, tp: int) -> tuple[Num, float]:
    """(bandwidth seconds, latency seconds) of one all-reduce of ``nbytes`` over ``tp_link``: the
    parts of ``allreduce_time`` kept apart (a serving engine scales the latency its own way)."""
    link = tp_link(hw, tp)
    if link is None:
        return 0.0, 0.0
    return 2.0 * (tp - 1) / tp * nbytes / link.effective_bw, collective_latency(tp, link)


def allreduce_time(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` among ``n`` ranks: 2(n−1)/n of it crosses each link."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / link.effective_bw + collective_latency(n, link)


@overload
def p2p_time(nbytes: float, link: Link) -> float: ...
@overload
def p2p_time(nbytes: np.ndarray, link: Link) -> np.ndarray: ...
def p2p_time(nbytes: Num, link: Link) -> Num:
    """One point-to-point send of ``nbytes`` (a pipeline stage's hand-off; scalar or per batch)."""
    return nbytes / link.effective_bw + link.latency


def dp_reduce_time(nbytes: float, plan: TrainPlan, hw: Hardware, ep: int = 1) -> float:
    """Hierarchical all-reduce of ``nbytes`` over the data-parallel group: inside the node, then
    between nodes. A reduce-scatter or an all-gather of the same buffer takes half of it.

    ``k`` DP ranks share a node; after the intra-node reduce-scatter each holds 1/k of the
    buffer, and all the node's GPUs drive its NICs at once, so each gets 1/gpus_per_node of
    the node's network bandwidth. Routed experts split ``ep`` ways are reduced over the
    expert-data-parallel group instead (Megatron-Core's expert_data_parallel group): every
    ``ep``-th DP rank holds the same experts, so fewer of them share a node and more of the
    buffer crosses the network (none of it when EP spans every DP rank).
    """
    dp = plan.grad_ranks // ep
    if dp <= 1:
        return 0.0
    model_parallel = plan.tp * plan.pp * ep
    k = max(1, min(dp, hw.gpus_per_node // model_parallel))
    nodes = math.ceil(dp / k)
    intra = allreduce_time(nbytes, k, hw.group_link(k * model_parallel, k)) if k > 1 else 0.0
    if nodes <= 1:
        return intra
    if hw.network is None:
        raise ValueError("a multi-node plan needs a network")
    share = min(hw.gpus_per_node, model_parallel * k)
    per_gpu = Link(hw.network.name, hw.network.bw_one_way / share, hw.network.efficiency, hw.network.latency)
    return intra + allreduce_time(nbytes / k, nodes, per_gpu)


def span_link(size: int, hw: Hardware, ranks: int | None = None) -> Link:
    """The link a group of ``size`` GPUs talks over: the node's link when the group fits in a
    node (on a mesh, to the ``ranks`` each GPU exchanges with: ``Hardware.group_link``), else each
    GPU's share of the node's network."""
    if size <= hw.gpus_per_node or hw.network is None:
        return hw.group_link(size, ranks)
    return Link(hw.network.name, hw.network.bw_one_way / hw.gpus_per_node, hw.network.efficiency,
                hw.network.latency)
