"""What a GPU family and a software stack achieve: the performance model's efficiency parameters.

Each parameter has a physical meaning (a fraction of a peak, an overlap fraction, an overhead in
seconds) and a plausible range. Their values live in ``catalogs/efficiency.yaml``, fitted by
``gpuopt fit`` to published runs, keyed by GPU family, precision and software stack; the catalog
resolves the most specific value for a context into one of these records. A field may also be a
numpy array (one value per calibration row), which is how the calibration evaluates every row in
one call: the model's formulas use only arithmetic and ``numpy`` element-wise functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar, Union

import numpy as np

T = TypeVar("T")
Num = Union[float, np.ndarray]  # noqa: UP007 - a runtime alias: `float | ndarray` is fine too on 3.10+


@dataclass(frozen=True)
class TrainParams:
    """Efficiency of a training step (``optimizer.perf.train``)."""

    gemm: Num = 0.7  # large GEMMs, fraction of the part's matmul ceiling (peak x TrainTerms.gemm_share)
    gemm_half_width: Num = 128.0  # a GEMM whose narrowest side is this wide runs at half that
    attention: Num = 0.45  # attention kernels (FlashAttention), fraction of the bf16 dense peak
    mem_bw: Num = 0.85  # streaming kernels, achieved fraction of memory bandwidth
    elementwise_bytes: Num = 300.0  # bytes per token, layer and unit of hidden moved by memory-bound
    # kernels (norms, activations, residuals, dropout, casts; forward and backward)
    tp_overlap: Num = 0.0  # share of tensor-parallel collectives hidden behind GEMMs
    pp_overlap: Num = 0.0  # share of pipeline sends hidden behind compute
    dp_overlap: Num = 0.5  # share of data-parallel / FSDP traffic hidden behind compute
    ep_overlap: Num = 0.0  # share of expert-parallel all-to-all hidden behind compute
    step_overhead: Num = 0.0  # seconds per optimizer step the stack spends outside the kernels
    layer_overhead: Num = 0.0  # seconds per layer per micro-batch outside the kernels (launches, syncs)
    moe_layer_overhead: Num = 0.0  # further seconds per MoE layer per micro-batch (routing, host syncs)
    straggler: Num = 0.0  # step slowdown per doubling of the servers a job spans (jitter, stragglers)


@dataclass(frozen=True)
class ServeParams:
    """Efficiency of an inference engine (``optimizer.perf.serve``)."""

    gemm: Num = 0.6  # large GEMMs (prefill, decode at large batch), fraction of the part's matmul ceiling (gemm_peak)
    gemm_half_width: Num = 128.0  # a GEMM whose narrowest side is this wide runs at half that
    attention: Num = 0.45  # prefill attention kernels, fraction of the 16-bit dense peak
    mem_bw: Num = 0.85  # streaming weights, fraction of memory bandwidth
    kv_bw: Num = 0.75  # reading the paged KV cache, fraction of memory bandwidth
    step_overhead: Num = 0.0  # seconds per decode step outside the kernels (scheduling, sampling)
    layer_overhead: Num = 0.0  # seconds per layer per decode step (kernel launches without CUDA graphs)
    seq_overhead: Num = 0.0  # seconds per sequence per decode step (sampling, detokenising, bookkeeping)
    server_overhead: Num = 0.0  # further seconds per decode step behind an API server (output streaming); 0 offline
    server_seq_overhead: Num = 0.0  # further seconds per sequence per decode step behind an API server; 0 offline
    request_overhead: Num = 0.0  # seconds of the front end's serial work per request (HTTP, tokenising)
    moe_efficiency: Num = 1.0  # routed experts' GEMM FLOPs relative to dense ones (grouped kernels, few tokens each)
    expert_latency: Num = 0.0  # seconds per routed expert slice a decode step reads, beyond streaming it (per GPU)
    longest_output: Num = 1.0  # a burst's longest output over its mean output, where lengths vary
    allreduce_latency: Num = 1.0  # multiplier on the links' collective latency (custom all-reduce kernels)
    tp_overlap: Num = 0.0  # share of TP all-reduces hidden behind compute (two-batch overlap)
    stage_overhead: Num = 0.0  # seconds per sequence per pipeline stage handing a micro-batch on (PP > 1 only)
    ridge_slowdown: Num = 1.0  # a kernel whose memory and compute times are equal takes this times either


def stack_arrays(records: Sequence[Any], cls: type[T]) -> T:
    """One record whose fields are arrays over ``records`` (the calibration's vectorised rows)."""
    return cls(**{f.name: np.array([getattr(r, f.name) for r in records], dtype=float)
                  for f in fields(cls)})  # type: ignore[arg-type]  # cls is a dataclass of Num fields
