"""The training model over arrays of plans: one call evaluates every plan template or dp band of
a GPU (issue 16: the planner evaluates hundreds of thousands of bands per problem).

``optimizer.perf.train`` is the reference. Every function here is its scalar namesake's formula,
written with the same operations in the same order over columns of plans (``PlanArrays``), so the
two agree to the last bit (``tests/test_perf_arrays.py`` checks this on every candidate of the
shipped examples). Base-2 logarithms of integers are taken with ``math.log2`` (numpy's differs
from it in the last bit for a few integers); everything else is IEEE arithmetic both ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from optimizer.perf import model as shape
from optimizer.perf.memory import ADAM_BYTES, GRAD_BYTES, WEIGHT_BYTES, mlp_activation_width
from optimizer.perf.specs import RECOMPUTE_MODES, Hardware, Link, ModelSpec, Precision, TrainPlan, evolve
from optimizer.perf.train import (
    ACT_BYTES,
    NO_FLASH_SCORE_BYTES,
    OPTIMIZER_BYTES_TOUCHED,
    TrainTerms,
    _stage_flops,
)

Ints = np.ndarray  # integer columns, one row per plan
FULL = RECOMPUTE_MODES.index("full")


@dataclass(frozen=True)
class PlanArrays:
    """``TrainPlan``s as columns: the fields a planner varies are arrays, the rest one value."""

    tp: Ints
    pp: Ints
    dp: Ints
    micro_batch: Ints
    num_micro_batches: Ints
    recompute: Ints  # index into RECOMPUTE_MODES
    zero: Ints
    cp: Ints
    ep: Ints
    virtual_stages: Ints
    precision: Precision
    seq_len: int
    flash_attention: bool = True
    grad_reduce_bytes: int = 4

    @property
    def sequence_parallel(self) -> np.ndarray:
        """The planner turns sequence parallelism on wherever TP > 1."""
        return self.tp > 1

    @property
    def replica_gpus(self) -> Ints:
        return np.asarray(self.tp * self.pp * self.cp)

    @property
    def unit_gpus(self) -> Ints:
        return np.asarray(self.replica_gpus * self.ep)

    @property
    def grad_ranks(self) -> Ints:
        return np.asarray(self.dp * self.cp)

    def take(self, rows: Ints) -> PlanArrays:
        """The plans at ``rows`` (indices or a mask)."""
        return evolve(self, **{f.name: getattr(self, f.name)[rows] for f in fields(self)
                               if isinstance(getattr(self, f.name), np.ndarray)})

    def plan(self, row: int) -> TrainPlan:
        """Row ``row`` as the scalar model's ``TrainPlan``."""
        return TrainPlan(tp=int(self.tp[row]), pp=int(self.pp[row]), dp=int(self.dp[row]),
                         micro_batch=int(self.micro_batch[row]), num_micro_batches=int(self.num_micro_batches[row]),
                         recompute=RECOMPUTE_MODES[int(self.recompute[row])], sequence_parallel=bool(self.tp[row] > 1),
                         zero=int(self.zero[row]), precision=self.precision, seq_len=self.seq_len,
                         flash_attention=self.flash_attention, ep=int(self.ep[row]), cp=int(self.cp[row]),
                         virtual_stages=int(self.virtual_stages[row]), grad_reduce_bytes=self.grad_reduce_bytes)


_LOG2: list[np.ndarray] = []  # math.log2 of 0 … 2¹⁶ − 1, made on first use (log2(0) as 0: never asked)
SMALL = 1 << 16


def log2(n: Ints) -> np.ndarray:
    """``math.log2`` of each positive integer (the scalar model's): a table below 2¹⁶, else
    through the distinct values."""
    n = np.asarray(n)
    if not _LOG2:
        _LOG2.append(np.array([0.0] + [math.log2(i) for i in range(1, SMALL)]))
    if n.size and int(n.max()) < SMALL:
        return np.asarray(_LOG2[0][n])
    values, inverse = np.unique(n, return_inverse=True)
    return np.array([math.log2(int(v)) for v in values], dtype=float)[inverse.reshape(np.shape(n))]


def _links(hw: Hardware, size: Ints, across: Link | None,
           ranks: Ints | int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(effective bandwidth, latency) per row of the link a group of ``size`` GPUs uses: the GPU
    link within its domain (on a mesh, to the ``ranks`` each GPU exchanges with), the host bus beyond
    it in the node, ``across`` (when given) beyond the node (``Hardware.group_link``, ``comm.span_link``)."""
    inside = size <= hw.link_domain
    # as ``Hardware.group_link`` orders it: the mesh's share of the line rate, then the efficiency
    share = hw.mesh_share(size if ranks is None else ranks)
    bw = np.where(inside, hw.link.bw_one_way * share * hw.link.efficiency, hw.host_bus.effective_bw)
    latency = np.where(inside, hw.link.latency, hw.host_bus.latency)
    if across is not None:
        out = size > hw.gpus_per_node
        bw, latency = np.where(out, across.effective_bw, bw), np.where(out, across.latency, latency)
    return bw, latency


def _span(hw: Hardware, size: Ints, ranks: Ints | int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``comm.span_link`` per row: beyond a node, each GPU's share of the node's network."""
    net = hw.network
    per_gpu = None if net is None else Link(net.name, net.bw_one_way / hw.gpus_per_node, net.efficiency, net.latency)
    return _links(hw, size, per_gpu, ranks)


def allreduce_time(nbytes: np.ndarray, n: Ints, bw: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """``comm.allreduce_time`` per row: a ring all-reduce plus a latency growing with log2(n)."""
    n = np.asarray(n)
    ring = 2.0 * (n - 1) / np.maximum(n, 1) * nbytes / bw + latency * np.maximum(1.0, log2(np.maximum(n, 1)) / 3.0)
    return np.where((n <= 1) | (nbytes <= 0), 0.0, ring)


def dp_reduce_time(nbytes: np.ndarray, p: PlanArrays, hw: Hardware, ep: Ints) -> np.ndarray:
    """``comm.dp_reduce_time`` per row: inside the node, then between nodes."""
    dp = p.grad_ranks // ep
    model_parallel = p.tp * p.pp * ep
    k = np.maximum(1, np.minimum(dp, hw.gpus_per_node // model_parallel))
    nodes = -(-dp // k)
    intra = np.where(k > 1, allreduce_time(nbytes, k, *_links(hw, k * model_parallel, None, k)), 0.0)
    if hw.network is None:
        if np.any((dp > 1) & (nodes > 1)):
            raise ValueError("a multi-node plan needs a network")
        return np.where(dp <= 1, 0.0, intra)
    share = np.minimum(hw.gpus_per_node, model_parallel * k)
    net = hw.network
    inter = allreduce_time(nbytes / k, nodes, net.bw_one_way / share * net.efficiency,
                           np.full(np.shape(k), net.latency))
    return np.where(dp <= 1, 0.0, np.where(nodes <= 1, intra, intra + inter))


def params_per_gpu(m: ModelSpec, p: PlanArrays) -> np.ndarray:
    """``perf.train.params_per_gpu`` per row."""
    elsewhere = shape.expert_params(m) * (1.0 - 1.0 / p.ep) if m.moe else 0.0
    return np.asarray((shape.param_count(m) - elsewhere) / (p.tp * p.pp))


def data_parallel_comm(m: ModelSpec, hw: Hardware, p: PlanArrays) -> tuple[np.ndarray, np.ndarray]:
    """``perf.train.data_parallel_comm`` per row: (seconds per step, seconds per micro-batch)."""
    multi_ep = m.moe & (p.ep > 1)
    experts = np.where(multi_ep, shape.expert_params(m) / (p.ep * p.tp * p.pp), 0.0)
    per_step = np.zeros(np.shape(p.tp))
    per_micro_batch = np.zeros(np.shape(p.tp))
    groups = [(params_per_gpu(m, p) - experts, np.ones_like(p.ep))]
    if np.any(multi_ep):  # without, the experts' pass adds 0.0 to every row (as the scalar model's does)
        groups.append((experts, p.ep))
    for local, ep in groups:
        grads = local * p.grad_reduce_bytes
        weights = local * WEIGHT_BYTES
        reduce_grads, reduce_weights = dp_reduce_time(grads, p, hw, ep), dp_reduce_time(weights, p, hw, ep)
        gather = reduce_weights / 2.0
        per_micro_batch = np.where(p.zero >= 3, per_micro_batch + (2.0 * gather + reduce_grads / 2.0), per_micro_batch)
        sharded = np.where(p.zero >= 1, per_step + (reduce_grads + reduce_weights) / 2.0, per_step + reduce_grads)
        per_step = np.where(p.zero >= 3, per_step, sharded)
    none = p.grad_ranks <= 1
    return np.where(none, 0.0, per_step), np.where(none, 0.0, per_micro_batch)


def _micro_batch_comm(m: ModelSpec, hw: Hardware, p: PlanArrays, tokens_mb: np.ndarray,
                      layers: Ints) -> dict[str, np.ndarray]:
    """``perf.train._micro_batch_comm`` per row."""
    tp, pp = p.tp, p.pp
    n_collectives = 4 + np.where(p.recompute == FULL, 2, 0)
    bw, lat = _span(hw, tp)
    buf = tokens_mb * m.hidden * ACT_BYTES
    out = {"tp": np.where(tp > 1, layers * n_collectives * allreduce_time(buf, tp, bw, lat), 0.0)}
    kv = tokens_mb * shape.kv_width(m) * ACT_BYTES / tp
    bw, lat = _span(hw, tp * p.cp, 2)  # a ring: each GPU sends to its neighbour
    out["cp"] = np.where(p.cp > 1, layers * 3 * (p.cp - 1) * (kv / bw + lat), 0.0)
    if m.moe:
        buf = tokens_mb * m.experts_active * m.hidden * ACT_BYTES / tp
        bw, lat = _span(hw, p.ep * tp, p.ep)
        a2a = buf * (p.ep - 1) / p.ep / bw + lat
        out["ep"] = np.where(p.ep > 1, -(-m.moe_layers // pp) * 4 * a2a, 0.0)
    else:
        out["ep"] = np.zeros(np.shape(tp))
    buf = tokens_mb * m.hidden * ACT_BYTES / np.where(p.sequence_parallel, tp, 1)
    bw, lat = _span(hw, p.replica_gpus, 2)
    out["pp"] = np.where(pp > 1, 2.0 * p.virtual_stages * (buf / bw + lat), 0.0)
    return out


def replica_terms(m: ModelSpec, hw: Hardware, p: PlanArrays) -> TrainTerms:
    """``perf.train.replica_terms`` per row (the plans are the planner's: checked on the way in)."""
    dev = hw.device
    s = p.seq_len
    tokens_mb = p.micro_batch * s / p.cp
    flops = _flops(m, p, tokens_mb)
    layers = -(-m.layers // p.pp)
    scores = 0.0 if p.flash_attention else (NO_FLASH_SCORE_BYTES * m.heads * s * layers / p.tp
                                             * shape.full_attention_share(m))
    comm = _micro_batch_comm(m, hw, p, tokens_mb, layers)
    hardware_flops = np.array([shape.hardware_flops_per_token(m, mode, s) for mode in RECOMPUTE_MODES])
    return TrainTerms(
        micro_batches=p.num_micro_batches.astype(float), bubble_slots=(p.pp - 1) / p.virtual_stages,
        gemm_flops=flops[0] * tokens_mb, gemm_flops_per_width=flops[1] * tokens_mb,
        attention_flops=flops[2] * tokens_mb, elementwise=flops[3] * tokens_mb, layer_passes=layers.astype(float),
        moe_layer_passes=(-(-m.moe_layers // p.pp)).astype(float) if m.moe else np.zeros(np.shape(p.pp)),
        score_bytes=scores * tokens_mb, peak=dev.peak_of(p.precision),
        peak_16bit=dev.peak_of("bf16", "fp16", p.precision), mem_bw=dev.mem_bw,
        gemm_share=dev.achievable_share(p.precision),
        tp_comm=comm["tp"], cp_comm=comm["cp"], ep_comm=comm["ep"], pp_comm=comm["pp"],
        fsdp_comm=0.0, dp_comm=0.0, optimizer_bytes=0.0, nodes=1.0, tokens_per_step=0.0, gpus=0.0,
        model_flops_per_token=shape.model_flops_per_token(m, s), hardware_flops_per_token=hardware_flops[p.recompute],
    )


def _flops(m: ModelSpec, p: PlanArrays, tokens_mb: np.ndarray) -> np.ndarray:
    """``perf.train._stage_flops`` per row (4 × rows), through the distinct stage shapes."""
    code = np.zeros(np.shape(p.tp), dtype=np.int64)
    # one integer per stage shape, in bits that hold every value the problem schema allows
    for column, bits in ((p.tp, 11), (p.pp, 10), (p.ep, 11), (p.recompute, 2), (p.micro_batch, 13), (p.cp, 11)):
        code = (code << bits) + column
    distinct, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    per_key = np.array([_stage_flops(m, int(p.tp[i]), int(p.pp[i]), int(p.ep[i]), RECOMPUTE_MODES[int(p.recompute[i])],
                                     p.flash_attention, p.seq_len, int(p.micro_batch[i]) * p.seq_len / int(p.cp[i]))
                        for i in first], dtype=float).reshape(-1, 4)
    return np.asarray(per_key[inverse.reshape(-1)].T)


def train_terms(m: ModelSpec, hw: Hardware, p: PlanArrays, replica: TrainTerms | None = None) -> TrainTerms:
    """``perf.train.train_terms`` per row; ``replica`` is ``replica_terms(m, hw, p)`` when known."""
    replica = replica or replica_terms(m, hw, p)
    dp_step, fsdp_mb = data_parallel_comm(m, hw, p)
    gpus = p.replica_gpus * p.dp
    sharding = np.where(p.zero >= 1, p.grad_ranks, 1)
    return evolve(replica, dp_comm=dp_step, fsdp_comm=fsdp_mb,
                  optimizer_bytes=params_per_gpu(m, p) / sharding * OPTIMIZER_BYTES_TOUCHED,
                  nodes=np.maximum(1, -(-gpus // hw.gpus_per_node)).astype(float),
                  tokens_per_step=(p.dp * p.num_micro_batches * p.micro_batch * p.seq_len).astype(float),
                  gpus=gpus.astype(float))


def take_terms(t: TrainTerms, rows: Ints) -> TrainTerms:
    """The terms of the plans at ``rows`` (array fields indexed, scalar ones kept)."""
    return evolve(t, **{f.name: getattr(t, f.name)[rows] for f in fields(t)
                        if isinstance(getattr(t, f.name), np.ndarray)})


def where_terms(mask: np.ndarray, a: TrainTerms, b: TrainTerms) -> TrainTerms:
    """Per row, ``a``'s terms where ``mask`` holds and ``b``'s elsewhere."""
    return TrainTerms(**{f.name: np.where(mask, getattr(a, f.name), getattr(b, f.name)) for f in fields(a)})


def activation_bytes_per_layer(m: ModelSpec, s: np.ndarray, p: PlanArrays) -> np.ndarray:
    """``perf.memory.activation_bytes_per_layer`` per row (Korthikanti et al. 2022, Table 2)."""
    b, h, a, tp = p.micro_batch, m.hidden, m.heads, p.tp
    full = 2.0 * s * b * h
    full = np.where(p.sequence_parallel, full / tp, full)
    unsharded = 10.0 * s * b * h + 2.0 * s * b * shape.latent_width(m)
    mlp = (6.0 if m.mlp == "swiglu" else 4.0) * s * b * mlp_activation_width(m)
    sharded = 2.0 * s * b * shape.mixer_activation_width(m) + mlp
    if not p.flash_attention:
        scores = 5.0 * a * s * s * b * shape.full_attention_share(m)
        sharded = np.where(p.recompute == RECOMPUTE_MODES.index("none"), sharded + scores, sharded)
    unsharded = np.where(p.sequence_parallel, unsharded / tp, unsharded)
    return np.asarray(np.where(p.recompute == FULL, full, unsharded + sharded / tp))


def training_memory(m: ModelSpec, p: PlanArrays, reserved: float = 0.0) -> np.ndarray:
    """``perf.memory.training_memory(...).total`` per row: bytes per GPU of the fuller of the
    first and the last pipeline stage (1F1B keeps ``min(pp, m)`` micro-batches in flight on the
    first, more when interleaved; the last holds the fp32 logits)."""
    s = p.seq_len / p.cp
    tp, pp, dp = p.tp, p.pp, p.grad_ranks
    layers = -(-m.layers // pp)
    per_layer = shape.layer_params(m)
    embed_in = m.vocab * m.hidden + (m.seq_len * m.hidden if m.gpt_block else 0)
    embed_out = 0 if m.tied_embeddings else m.vocab * m.hidden
    logits = 4.0 * s * p.micro_batch * m.vocab / tp
    act_layer = activation_bytes_per_layer(m, s, p)
    in_flight = np.minimum(pp, p.num_micro_batches)
    interleaved = (p.virtual_stages > 1) & (pp > 1)
    in_flight = np.where(interleaved, in_flight * (1.0 + (pp - 1) / (pp * p.virtual_stages)), in_flight)
    one = (shape.param_count(m), act_layer * layers + logits)
    first = (layers * per_layer + embed_in, act_layer * layers * in_flight)
    last = (layers * per_layer + embed_out + shape.final_norm_params(m), act_layer * layers + logits)
    # as perf.memory's: routed experts sharded over ep, their ZeRO state over the dp/ep ranks holding them
    experts = shape.expert_params(m) / m.layers * layers if m.moe else 0.0
    routed, edp = experts / p.ep / tp, np.maximum(dp / p.ep, 1.0)

    def total(params: np.ndarray | int, acts: np.ndarray) -> np.ndarray:
        dense = (params - experts) / tp
        weights, grads, optim = (nbytes * dense / np.where(p.zero >= z, dp, 1)
                                 + nbytes * routed / np.where(p.zero >= z, edp, 1)
                                 for nbytes, z in ((WEIGHT_BYTES, 3), (GRAD_BYTES, 2), (ADAM_BYTES, 1)))
        return np.asarray(weights + grads + optim + acts + reserved)

    return np.where(pp == 1, total(*one), np.maximum(total(*first), total(*last)))


def min_dp_that_fits(m: ModelSpec, p: PlanArrays, capacity: float, reserved: float, dp_cap: Ints) -> Ints:
    """``plans.train_bands.min_dp_that_fits`` per row: the least dp (units of ep replicas) whose
    memory fits, by the same bisection (memory falls with dp under ZeRO), or -1 where none does."""
    def fits(dp: Ints) -> np.ndarray:
        return training_memory(m, evolve(p, dp=dp * p.ep), reserved) <= capacity

    ones = np.ones_like(dp_cap)
    search = (p.zero != 0) & (dp_cap > 1)
    lo, hi = ones.copy(), np.where(search, dp_cap, 1)
    possible = np.where(search, fits(hi), fits(ones))
    while np.any(active := possible & (lo < hi)):
        mid = (lo + hi) // 2
        ok = fits(mid)
        hi, lo = np.where(active & ok, mid, hi), np.where(active & ~ok, mid + 1, lo)
    return np.where(possible, lo, -1)
